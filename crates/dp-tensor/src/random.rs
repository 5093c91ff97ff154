//! Keyed, splittable random numbers: JAX's counter-based scheme (Threefry-2x32, 20 rounds, in
//! its "partitionable" layout), so a key gives the same numbers on every machine and in any
//! order of use, and `uniform`, `normal`, `bernoulli` and key splitting give the numbers JAX
//! gives for the same seed (to float rounding; tests/random.rs compares). A key is 64 bits,
//! JAX's two 32-bit words packed high word first.
//!
//! Why Threefry rather than the sequential SplitMix64 behind `randn seed`: a counter-based
//! generator draws element `i` of any request directly, so splitting is free and results do not
//! depend on how many numbers were drawn before — the property that makes `split_key` sound.

use crate::{TResult, Tensor};

/// A key: JAX's `key_data`, words `[hi, lo]` packed as `hi << 32 | lo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub u64);

const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// Threefry-2x32 with 20 rounds: the block function of Salmon et al. (SC 2011), as JAX's.
fn threefry2x32(key: Key, counter: [u32; 2]) -> [u32; 2] {
    let (k0, k1) = ((key.0 >> 32) as u32, key.0 as u32);
    let ks = [k0, k1, k0 ^ k1 ^ 0x1BD1_1BDA];
    let mut x = [counter[0].wrapping_add(ks[0]), counter[1].wrapping_add(ks[1])];
    for group in 0..5usize {
        for &r in &ROTATIONS[group % 2] {
            x[0] = x[0].wrapping_add(x[1]);
            x[1] = x[1].rotate_left(r) ^ x[0];
        }
        x[0] = x[0].wrapping_add(ks[(group + 1) % 3]);
        x[1] = x[1].wrapping_add(ks[(group + 2) % 3]).wrapping_add(group as u32 + 1);
    }
    x
}

/// The block for flat element `i` of a request: the counter is `i` split into two words.
fn block(key: Key, i: u64) -> [u32; 2] {
    threefry2x32(key, [(i >> 32) as u32, i as u32])
}

impl Key {
    /// `jax.random.key(seed)`: the seed's two's-complement bits, high word first.
    pub fn from_seed(seed: i64) -> Key {
        Key(seed as u64)
    }

    /// `jax.random.split(key, n)`: key `i` is the block at counter `i`.
    pub fn split(self, n: usize) -> Vec<Key> {
        (0..n as u64)
            .map(|i| {
                let [a, b] = block(self, i);
                Key((a as u64) << 32 | b as u64)
            })
            .collect()
    }

    /// `jax.random.bits(key, (n,), uint32)`.
    fn bits32(self, n: usize) -> impl Iterator<Item = u32> {
        (0..n as u64).map(move |i| {
            let [a, b] = block(self, i);
            a ^ b
        })
    }

    /// `n` floats uniform in [0, 1): the top 23 bits as a float32 mantissa, as JAX does.
    fn unit_f32(self, n: usize) -> impl Iterator<Item = f32> {
        self.bits32(n).map(|bits| f32::from_bits(bits >> 9 | 0x3F80_0000) - 1.0)
    }

    /// `jax.random.uniform(key, shape, float32, lo, hi)` (XLA fuses its `u * (hi - lo) + lo` into
    /// one rounding, so `mul_add` gives its numbers bit for bit), and the draws in [0, 1) it was made
    /// from (a caller differentiating in `lo` and `hi` needs them).
    pub fn uniform(self, shape: &[usize], lo: f32, hi: f32) -> TResult<(Tensor, Vec<f32>)> {
        let unit: Vec<f32> = self.unit_f32(shape.iter().product()).collect();
        let values = Tensor::from_vec(shape, unit.iter().map(|&u| u.mul_add(hi - lo, lo).max(lo)).collect())?;
        Ok((values, unit))
    }

    /// `jax.random.normal(key, shape, float32)`: √2 · erfinv(u), u uniform in (−1, 1).
    pub fn normal(self, shape: &[usize]) -> TResult<Tensor> {
        let n = shape.iter().product();
        let lo = -1.0f32 + f32::EPSILON / 2.0; // nextafter(-1, 0)
        let z = self.unit_f32(n).map(|u| std::f32::consts::SQRT_2 * erfinv(u.mul_add(1.0 - lo, lo).max(lo)));
        Tensor::from_vec(shape, z.collect())
    }

    /// `jax.random.bernoulli(key, p, shape)`: a bool tensor, true with probability `p`.
    pub fn bernoulli(self, p: f64, shape: &[usize]) -> TResult<Tensor> {
        let n = shape.iter().product();
        Tensor::from_bools(shape, self.unit_f32(n).map(|u| (u as f64) < p).collect())
    }

    /// A draw uniform in `0..span`, unbiased by rejection over 64-bit blocks: draws at or above
    /// the largest multiple of `span` are skipped. `counter` is the next block to use.
    fn below(self, span: u64, counter: &mut u64) -> u64 {
        let zone = u64::MAX - u64::MAX % span;
        loop {
            let [a, b] = block(self, *counter);
            *counter += 1;
            let draw = (a as u64) << 32 | b as u64;
            if draw < zone {
                return draw % span;
            }
        }
    }

    /// Integers uniform in [lo, hi) (int64), by `below`; dp's own scheme (JAX's `randint` is not
    /// reproduced).
    pub fn randint(self, lo: i64, hi: i64, shape: &[usize]) -> TResult<Tensor> {
        let span = hi.wrapping_sub(lo) as u64;
        let mut counter = 0u64;
        let out = (0..shape.iter().product::<usize>()).map(|_| lo.wrapping_add(self.below(span, &mut counter) as i64));
        Tensor::from_i64s(shape, out.collect())
    }

    /// A random permutation of `0..n` (int64): Fisher–Yates driven by `below`.
    pub fn permutation(self, n: usize) -> TResult<Tensor> {
        let mut p: Vec<i64> = (0..n as i64).collect();
        let mut counter = 0u64;
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1, &mut counter) as usize;
            p.swap(i, j);
        }
        Tensor::from_i64s(&[n], p)
    }
}

/// The inverse error function in float32: Giles' single-precision approximation ("Approximating
/// the erfinv function", GPU Computing Gems, 2011), the one XLA lowers `erf_inv` to.
fn erfinv(x: f32) -> f32 {
    const SMALL: [f32; 9] = [
        2.810_226_4e-8,
        3.432_739_4e-7,
        -3.523_387_7e-6,
        -4.391_506_5e-6,
        2.185_808_7e-4,
        -1.253_725e-3,
        -4.177_681_6e-3,
        0.246_640_73,
        1.501_409_4,
    ];
    const LARGE: [f32; 9] = [
        -2.002_142_6e-4,
        1.009_505_6e-4,
        1.349_343_2e-3,
        -3.673_428_4e-3,
        5.739_507_7e-3,
        -7.622_461_3e-3,
        9.438_870_5e-3,
        1.001_674,
        2.832_976_8,
    ];
    if x.abs() == 1.0 {
        return x * f32::INFINITY;
    }
    let w = -(-x * x).ln_1p();
    let (w, c) = if w < 5.0 { (w - 2.5, &SMALL) } else { (w.sqrt() - 3.0, &LARGE) };
    // Fused, as XLA evaluates it: with separate roundings 4% of draws differ from JAX by an ulp.
    let p = c[1..].iter().fold(c[0], |p, &ci| p.mul_add(w, ci));
    p * x
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected words from JAX 0.10.2 (`jax.random.key_data(jax.random.split(jax.random.key(42), 3))`
    // and `jax.random.bits(jax.random.key(42), (4,), jnp.uint32)`).
    #[test]
    fn split_and_bits_match_jax() {
        let k = Key::from_seed(42);
        let words: Vec<(u32, u32)> = k.split(3).iter().map(|k| ((k.0 >> 32) as u32, k.0 as u32)).collect();
        assert_eq!(words, [(1832780943, 270669613), (64467757, 2916123636), (2465931498, 255383827)]);
        assert_eq!(k.bits32(4).collect::<Vec<_>>(), [2098992034, 2919706841, 2646866425, 2409546199]);
        assert_eq!(Key::from_seed(-1).0, u64::MAX);
    }

    #[test]
    fn randint_stays_in_range_and_permutation_is_one() {
        let t = Key::from_seed(7).randint(-3, 4, &[1000]).unwrap();
        assert!(t.i64s().unwrap().iter().all(|&v| (-3..4).contains(&v)));
        let mut p: Vec<i64> = Key::from_seed(7).permutation(50).unwrap().i64s().unwrap().iter().copied().collect();
        p.sort();
        assert_eq!(p, (0..50).collect::<Vec<_>>());
    }
}
