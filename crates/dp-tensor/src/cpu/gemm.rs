//! Single-precision matrix products for the CPU backend: `gemm` (C = αAB + βC) and `gemv`.
//!
//! Large products follow the Goto/BLIS scheme: A is packed into MR-row panels and B into
//! NR-column panels (zero-padded, so the micro-kernel never sees an edge), the k, m and n loops
//! are blocked so a B micro-panel stays in L1 and an A block in L2, and a register-blocked FMA
//! micro-kernel computes one MR × NR tile of C at a time. Packing is what makes any operand
//! layout fast: a transposed view only changes how a panel is copied, never the kernel.
//!
//! The kernel is chosen once at run time (AVX-512F, else AVX2 + FMA, else portable code that
//! the compiler vectorises for whatever the target has). Big products are split over a small
//! persistent thread pool (`DP_NUM_THREADS`, default: all cores); each thread owns a disjoint
//! range of C's rows or columns, so no two threads write the same element.
//!
//! Small products (m·n·k up to 128³) with row-major B and C skip packing: B is read straight
//! from cache by a 4-row × 64-column kernel. Matrix-vector products, rank-1 updates (k = 1)
//! and products with a single row or column never pack and never touch the pool: their cost is
//! a few passes over memory, so the fixed overhead is what matters.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::OnceLock;

use ndarray::{ArrayView1, ArrayView2, ArrayViewMut1, ArrayViewMut2, Axis};

/// c = alpha * a @ b + beta * c, for any strides of a and b (including transposed views,
/// i.e. column-major, and negative or zero strides — fall back to a simple correct loop for
/// exotic ones), c any strides too (fast path when c is row-major contiguous).
pub fn gemm(alpha: f32, a: ArrayView2<f32>, b: ArrayView2<f32>, beta: f32, c: ArrayViewMut2<f32>) {
    gemm_with(Isa::detect(), max_threads(), alpha, a, b, beta, c);
}

/// `gemm` on this thread only: one product of a batch whose items already run in parallel.
pub fn gemm_serial(alpha: f32, a: ArrayView2<f32>, b: ArrayView2<f32>, beta: f32, c: ArrayViewMut2<f32>) {
    gemm_with(Isa::detect(), 1, alpha, a, b, beta, c);
}

/// Runs `work(i, alone)` for every i in `0..items` (the products of a batch, `flops_each`
/// each). When there are enough items to occupy the pool, or each is too small to be worth
/// splitting itself, the items are spread over the pool's threads and `alone` is false (the
/// product must stay on its thread: `gemm_serial`); otherwise they run one after another with
/// `alone` true (each may split itself: `gemm`). Batching this way packs nothing twice and
/// allocates nothing per item.
pub fn for_each_product(items: usize, flops_each: f64, work: &(dyn Fn(usize, bool) + Sync)) {
    let (want, wake) = threads_for(flops_each * items as f64, max_threads());
    let spread = want > 1 && items >= 2 && (items >= want || flops_each < PAR_MIN_FLOPS_ASLEEP);
    if !spread {
        for i in 0..items {
            work(i, true);
        }
        return;
    }
    // Several chunks per thread, claimed as threads come free: on a loaded machine a thread
    // that the scheduler holds back does less of the batch, instead of the whole batch
    // waiting for its fixed share (one claim is an atomic add, against ≥ 10⁵ flops of work).
    let chunks = items.min(want * CHUNKS_PER_THREAD);
    // SAFETY: only the lifetime is erased. `pool::run` calls `work` only for claimed chunks and
    // returns only once every claimed chunk has finished (see `pool::Claims`), so no call
    // outlives this borrow; a worker that keeps the job afterwards finds nothing to claim.
    let work =
        unsafe { std::mem::transmute::<&(dyn Fn(usize, bool) + Sync), &'static (dyn Fn(usize, bool) + Sync)>(work) };
    pool::run(
        chunks,
        want - 1,
        wake,
        Box::new(move |t| {
            for i in t * items / chunks..(t + 1) * items / chunks {
                work(i, false);
            }
        }),
    );
}

/// y = alpha * a @ x + beta * y  (a: m x k any strides, x: k, y: m)
pub fn gemv(alpha: f32, a: ArrayView2<f32>, x: ArrayView1<f32>, beta: f32, y: ArrayViewMut1<f32>) {
    gemv_with(Isa::detect(), alpha, a, x, beta, y);
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// How many chunks of a batch of products each thread may claim (`for_each_product`).
const CHUNKS_PER_THREAD: usize = 8;

/// From this many flops (2mnk) on, a product is split over the threads that are awake (still
/// polling after an earlier product, which costs the caller well under a microsecond)...
const PAR_MIN_FLOPS_AWAKE: f64 = 5.0e5;
/// ...and from this many on, sleeping ones are woken too: the futex wake-up costs the caller
/// about 10 µs on a VM, worth it only when the product is several times longer.
const PAR_MIN_FLOPS_ASLEEP: f64 = 2.0e7;

/// Up to this m·n·k (with C row-major) a product skips packing and reads B straight from
/// cache: packing costs more than it saves at these sizes (2× at 48³, ~10% at 128³).
#[cfg(target_arch = "x86_64")]
const SMALL_MAX_MNK: usize = 128 * 128 * 128;

/// The instruction sets with a kernel of their own, ordered by preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Isa {
    Portable,
    Avx2,
    Avx512,
}

impl Isa {
    /// The best set the CPU has, or a lower one named by `DP_GEMM_ISA` (`avx512`, `avx2`,
    /// `portable`: for comparing kernels; a set the CPU lacks is ignored).
    fn detect() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            let best = Isa::best();
            match std::env::var("DP_GEMM_ISA").as_deref() {
                Ok("portable") => Isa::Portable,
                Ok("avx2") => Isa::Avx2.min(best),
                _ => best,
            }
        })
    }

    fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                    return Isa::Avx512;
                }
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    return Isa::Avx2;
                }
            }
            Isa::Portable
        })
    }

    /// Never more than the CPU has: this is what makes it sound to call the kernels of the
    /// returned set, whatever a caller (a test) asked for.
    fn clamp(self) -> Isa {
        self.min(Isa::best())
    }
}

/// The threads dp's CPU work may use: `DP_NUM_THREADS`, or every core (at most 64).
pub fn max_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let env = std::env::var("DP_NUM_THREADS").ok().and_then(|s| s.trim().parse::<usize>().ok());
        let n = env.filter(|&n| n > 0).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        n.min(64)
    })
}

// ---------------------------------------------------------------------------------------------
// Raw matrix handles
// ---------------------------------------------------------------------------------------------

/// A read-only strided matrix: element (i, j) lives at `ptr + i*rs + j*cs`. Built only from a
/// live `ArrayView2`, and indexed only inside its shape.
#[derive(Clone, Copy)]
struct Mat {
    ptr: *const f32,
    rs: isize,
    cs: isize,
}

/// The output matrix; threads write disjoint tiles of it.
#[derive(Clone, Copy)]
struct MatMut {
    ptr: *mut f32,
    rs: isize,
    cs: isize,
}

// SAFETY: `Mat` is only read through, and every use on another thread ends before `gemm`
// returns, while the views it came from are still borrowed (see `pool::Claims`). `MatMut` is
// shared, but each chunk of work gets a disjoint range of rows or columns, so no element is
// written twice or read while another thread writes it.
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}
unsafe impl Send for MatMut {}
unsafe impl Sync for MatMut {}

impl Mat {
    fn of(v: &ArrayView2<f32>) -> Mat {
        Mat { ptr: v.as_ptr(), rs: v.strides()[0], cs: v.strides()[1] }
    }
    /// The transpose: the same memory with the strides swapped.
    fn t(self) -> Mat {
        Mat { ptr: self.ptr, rs: self.cs, cs: self.rs }
    }
    /// # Safety
    /// (i, j) must lie inside the view this was made from.
    #[inline(always)]
    unsafe fn at(self, i: usize, j: usize) -> f32 {
        *self.ptr.offset(i as isize * self.rs + j as isize * self.cs)
    }
    #[inline(always)]
    fn addr(self, i: usize, j: usize) -> *const f32 {
        self.ptr.wrapping_offset(i as isize * self.rs + j as isize * self.cs)
    }
}

impl MatMut {
    #[inline(always)]
    fn addr(self, i: usize, j: usize) -> *mut f32 {
        self.ptr.wrapping_offset(i as isize * self.rs + j as isize * self.cs)
    }
}

/// A stride that lets consecutive elements be loaded as a vector (a length-1 axis has any).
fn unit(len: usize, stride: isize) -> bool {
    len <= 1 || stride == 1
}

// ---------------------------------------------------------------------------------------------
// Reusable scratch
// ---------------------------------------------------------------------------------------------

thread_local! {
    /// Packing buffers, kept per thread so steady-state products never allocate.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The unpacked kernels' copies of one column block of B (`x86::with_copied_block`), apart from
    /// SCRATCH, which may hold the row-major copy of B that the block is taken from.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` floats of 64-byte aligned (when the allocator allows) scratch memory.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    with_buffer(&SCRATCH, len, f)
}

/// `with_scratch` on the PANEL buffer.
#[cfg(target_arch = "x86_64")]
fn with_panel<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    with_buffer(&PANEL, len, f)
}

fn with_buffer<R>(
    buffer: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    // A cache line of slack so the usable part can start on a line boundary.
    const SLACK: usize = 16;
    fn aligned(v: &mut [f32], len: usize) -> &mut [f32] {
        let off = v.as_ptr().align_offset(64);
        let off = if off < SLACK { off } else { 0 };
        &mut v[off..off + len]
    }
    buffer.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len + SLACK {
                v.resize(len + SLACK, 0.0);
            }
            f(aligned(&mut v, len))
        }
        // Only reachable if `f` itself re-entered; a private buffer keeps that correct.
        Err(_) => f(aligned(&mut vec![0.0; len + SLACK], len)),
    })
}

// ---------------------------------------------------------------------------------------------
// GEMM driver
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    a: Mat,
    b: Mat,
    c: MatMut,
}

fn gemm_with(
    isa: Isa,
    threads: usize,
    alpha: f32,
    a: ArrayView2<f32>,
    b: ArrayView2<f32>,
    beta: f32,
    mut c: ArrayViewMut2<f32>,
) {
    let isa = isa.clamp();
    let (m, k) = a.dim();
    let n = b.dim().1;
    // A real assert: the kernels index through raw pointers, so a mismatch must not get past.
    assert!(b.dim().0 == k && c.dim() == (m, n), "gemm: shapes {:?} @ {:?} -> {:?}", a.dim(), b.dim(), c.dim());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 || alpha == 0.0 {
        scale(beta, c.view_mut().into_dyn());
        return;
    }
    let (crs, ccs) = (c.strides()[0], c.strides()[1]);
    // The kernels store rows of C with vector stores; a column-major C is the row-major
    // transpose of Cᵀ = BᵀAᵀ, so solve that instead of scattering every element.
    if !unit(n, ccs) && unit(m, crs) {
        return gemm_with(isa, threads, alpha, b.reversed_axes(), a.reversed_axes(), beta, c.reversed_axes());
    }
    if n == 1 {
        return gemv_with(isa, alpha, a, b.index_axis(Axis(1), 0), beta, c.index_axis_mut(Axis(1), 0));
    }
    if m == 1 {
        return gemv_with(isa, alpha, b.reversed_axes(), a.index_axis(Axis(0), 0), beta, c.index_axis_mut(Axis(0), 0));
    }
    if k == 1 {
        return rank1(isa, alpha, a.index_axis(Axis(1), 0), b.index_axis(Axis(0), 0), beta, c);
    }
    let p = Problem {
        m,
        n,
        k,
        alpha,
        beta,
        a: Mat::of(&a),
        b: Mat::of(&b),
        c: MatMut { ptr: c.as_mut_ptr(), rs: crs, cs: ccs },
    };
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 && unit(n, p.c.cs) && m.saturating_mul(n).saturating_mul(k) <= SMALL_MAX_MNK {
        if unit(n, p.b.cs) {
            return small(isa, p, threads);
        }
        // A transposed (or strided) B is copied to row-major once: k·n floats against m·k·n
        // FMAs, and the product then needs no packing at all.
        return with_scratch(k * n, |bt| {
            if unit(k, p.b.rs) {
                let pack = if isa == Isa::Avx512 { Pack::Avx512 } else { Pack::Avx2 };
                // SAFETY: `isa` is clamped to what the CPU has; the n columns of B are k
                // contiguous floats each.
                unsafe { pack.lines(bt, p.b.ptr, p.b.cs, n, n, k) };
            } else {
                for (i, d) in bt.iter_mut().enumerate() {
                    // SAFETY: (i / n, i % n) is inside B.
                    *d = unsafe { p.b.at(i / n, i % n) };
                }
            }
            small(isa, Problem { b: Mat { ptr: bt.as_ptr(), rs: n as isize, cs: 1 }, ..p }, threads)
        });
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => run_packed::<x86::Avx512>(p, threads),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => run_packed::<x86::Avx2>(p, threads),
        _ => run_packed::<Portable>(p, threads),
    }
}

/// The unpacked product (AVX2 or AVX-512; B and C with unit column stride; see
/// `SMALL_MAX_MNK`).
#[cfg(target_arch = "x86_64")]
fn small(isa: Isa, p: Problem, threads: usize) {
    // Nothing is packed, so splitting duplicates no work.
    if isa == Isa::Avx512 {
        split(p, threads, false, 16, 4, small_block::<true>)
    } else {
        split(p, threads, false, 16, 4, small_block::<false>)
    }
}

/// One block of `small`'s product: rows × cols of C.
#[cfg(target_arch = "x86_64")]
fn small_block<const AVX512: bool>(p: &Problem, rows: Range<usize>, cols: Range<usize>) {
    let q = Problem {
        m: rows.len(),
        n: cols.len(),
        a: Mat { ptr: p.a.addr(rows.start, 0), ..p.a },
        b: Mat { ptr: p.b.addr(0, cols.start), ..p.b },
        c: MatMut { ptr: p.c.addr(rows.start, cols.start), ..p.c },
        ..*p
    };
    // SAFETY: only reached with the instruction set present (`small`'s `isa` is clamped to
    // the CPU's); `q` is a block of the views, B and C with unit column stride.
    unsafe {
        if AVX512 {
            x86::small_avx512(q)
        } else {
            x86::small_avx2(q)
        }
    }
}

fn scale(beta: f32, mut c: ndarray::ArrayViewMutD<f32>) {
    if beta == 0.0 {
        c.fill(0.0); // not `*= 0`: the old contents may be NaN
    } else if beta != 1.0 {
        c.map_inplace(|v| *v *= beta);
    }
}

/// A register-blocked micro-kernel and the cache blocking that suits it.
trait Kernel {
    /// Rows of a tile (broadcast from packed A).
    const MR: usize;
    /// Columns of a tile (vector loads from packed B).
    const NR: usize;
    const KC: usize;
    const MC: usize;
    const NC: usize;
    /// The transposing panel copy the kernel's instruction set allows (the kernel implies the
    /// CPU has it).
    const PACK: Pack = Pack::Scalar;
    /// c[i][j] = alpha * Σ_p a[p*MR + i] * b[p*NR + j] + beta * c[i][j] for i < mr, j < nr, where
    /// c[i][j] is at `c + i*rs + j*cs`; beta == 0 never reads c.
    ///
    /// # Safety
    /// The CPU has the kernel's instruction set; `a` and `b` hold kc*MR and kc*NR floats; the
    /// mr × nr tile of c is valid for reads and writes and not accessed by anyone else.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        kc: usize,
        a: *const f32,
        b: *const f32,
        alpha: f32,
        beta: f32,
        c: *mut f32,
        rs: isize,
        cs: isize,
        mr: usize,
        nr: usize,
    );
}

fn run_packed<K: Kernel>(p: Problem, threads: usize) {
    // Tiles are MR × NR with MR != NR, so a thin C (n = 10, say) wastes most of each tile;
    // computing Cᵀ = BᵀAᵀ instead may pad far less (C is then stored through `store_tile`).
    let padded = |m: usize, n: usize| m.next_multiple_of(K::MR) * n.next_multiple_of(K::NR);
    if 4 * padded(p.n, p.m) < 3 * padded(p.m, p.n) {
        let t = Problem {
            m: p.n,
            n: p.m,
            a: Mat { ptr: p.b.ptr, rs: p.b.cs, cs: p.b.rs },
            b: Mat { ptr: p.a.ptr, rs: p.a.cs, cs: p.a.rs },
            c: MatMut { ptr: p.c.ptr, rs: p.c.cs, cs: p.c.rs },
            ..p
        };
        return run_packed_as_is::<K>(t, threads);
    }
    run_packed_as_is::<K>(p, threads)
}

/// Splits the work into chunks for the pool: by columns of C or by rows, whichever leaves the
/// cheaper operand to be packed again for every chunk.
fn run_packed_as_is<K: Kernel>(p: Problem, threads: usize) {
    // Splitting n makes every chunk pack all of A, splitting m all of B. Without the AVX-512
    // transposing copy, a panel that is not contiguous along the panel packs several times
    // slower than one that is.
    let slow = if K::PACK == Pack::Scalar { 3 } else { 1 };
    let cost_a = if unit(p.m, p.a.rs) { 1 } else { slow } * p.m;
    let cost_b = if unit(p.n, p.b.cs) { 1 } else { slow } * p.n;
    let split_n = cost_a <= cost_b;
    split(p, threads, split_n, K::NR, K::MR, packed_block::<K>);
}

/// How many threads (of at most `threads`) work of `flops` flops should use, and whether it is
/// worth waking sleeping workers for (see `PAR_MIN_FLOPS_AWAKE`).
fn threads_for(flops: f64, threads: usize) -> (usize, bool) {
    let flops = if force_parallel() { f64::INFINITY } else { flops };
    let wake = flops >= PAR_MIN_FLOPS_ASLEEP;
    let want = if threads <= 1 || flops < PAR_MIN_FLOPS_AWAKE {
        1
    } else if wake {
        threads
    } else {
        1 + pool::awake(threads - 1)
    };
    (want, wake)
}

/// Runs `body` over C on up to `threads` threads, each chunk a range of whole `step_n`-column
/// (if `split_n`) or `step_m`-row blocks; falls back to the other dimension when the chosen one
/// has too few blocks. How many threads depends on the size of the product (see
/// `PAR_MIN_FLOPS_AWAKE`).
fn split(
    p: Problem,
    threads: usize,
    split_n: bool,
    step_n: usize,
    step_m: usize,
    body: fn(&Problem, Range<usize>, Range<usize>),
) {
    let (want, wake) = threads_for(2.0 * p.m as f64 * p.n as f64 * p.k as f64, threads);
    let (n_blocks, m_blocks) = (p.n.div_ceil(step_n), p.m.div_ceil(step_m));
    let split_n = if n_blocks < want {
        false
    } else if m_blocks < want {
        true
    } else {
        split_n
    };
    let (blocks, step, len) = if split_n { (n_blocks, step_n, p.n) } else { (m_blocks, step_m, p.m) };
    let chunks = want.min(blocks);
    if chunks <= 1 {
        return body(&p, 0..p.m, 0..p.n);
    }
    let range = move |t: usize| (t * blocks / chunks * step).min(len)..((t + 1) * blocks / chunks * step).min(len);
    pool::run(
        chunks,
        want - 1,
        wake,
        Box::new(move |t| if split_n { body(&p, 0..p.m, range(t)) } else { body(&p, range(t), 0..p.n) }),
    );
}

/// C[rows, cols] = alpha * A[rows, :] @ B[:, cols] + beta * C[rows, cols] on one thread.
fn packed_block<K: Kernel>(p: &Problem, rows: Range<usize>, cols: Range<usize>) {
    if rows.is_empty() || cols.is_empty() {
        return;
    }
    let kcap = p.k.min(K::KC);
    let mcap = rows.len().min(K::MC).next_multiple_of(K::MR);
    let ncap = cols.len().min(K::NC).next_multiple_of(K::NR);
    with_scratch(kcap * (mcap + ncap), |buf| {
        let (apack, bpack) = buf.split_at_mut(kcap * mcap);
        for jc in cols.clone().step_by(K::NC) {
            let nc = K::NC.min(cols.end - jc);
            for pc in (0..p.k).step_by(K::KC) {
                let kc = K::KC.min(p.k - pc);
                pack_panels::<K>(bpack, p.b.t(), jc, nc, pc, kc, K::NR);
                // Later k blocks accumulate onto what the first one stored.
                let beta = if pc == 0 { p.beta } else { 1.0 };
                for ic in rows.clone().step_by(K::MC) {
                    let mc = K::MC.min(rows.end - ic);
                    pack_panels::<K>(apack, p.a, ic, mc, pc, kc, K::MR);
                    for jr in (0..nc).step_by(K::NR) {
                        let bp = &bpack[jr * kc..][..K::NR * kc];
                        for ir in (0..mc).step_by(K::MR) {
                            let ap = &apack[ir * kc..][..K::MR * kc];
                            let c = p.c.addr(ic + ir, jc + jr);
                            let (mr, nr) = (K::MR.min(mc - ir), K::NR.min(nc - jr));
                            // SAFETY: `K` was chosen from the detected instruction set; the packed
                            // panels are exactly kc*MR and kc*NR floats; the tile lies inside C and
                            // inside this thread's rows × cols.
                            unsafe { K::tile(kc, ap.as_ptr(), bp.as_ptr(), p.alpha, beta, c, p.c.rs, p.c.cs, mr, nr) };
                        }
                    }
                }
            }
        }
    });
}

/// Packs A[i0.., p0..p0+kc] (mc rows) as `mr_`-row panels, each step p holding `mr_`
/// consecutive floats; rows past mc are zero so the kernel needs no edge cases. B's panels are
/// the same thing for Bᵀ (`Mat::t`), with NR for the width.
fn pack_panels<K: Kernel>(dst: &mut [f32], a: Mat, i0: usize, mc: usize, p0: usize, kc: usize, mr_: usize) {
    for (r, panel) in dst.chunks_exact_mut(mr_ * kc).take(mc.div_ceil(mr_)).enumerate() {
        let i = i0 + r * mr_;
        let rows = mr_.min(mc - r * mr_);
        if unit(rows, a.rs) {
            // Column-major A (a transposed view): each step is a contiguous run. A full panel
            // of a kernel's width copies each step as a fixed-size move: a `memcpy` call per
            // step of 6 or 16 floats costs more than the copy itself.
            // SAFETY (each arm): rows i..i+rows of columns p0..p0+kc are inside A, and
            // contiguous within each column; the panel holds kc steps of mr_ = rows floats.
            match (rows == mr_, rows) {
                (true, 4) => unsafe { copy_steps::<4>(panel, a, i, p0, kc) },
                (true, 6) => unsafe { copy_steps::<6>(panel, a, i, p0, kc) },
                (true, 8) => unsafe { copy_steps::<8>(panel, a, i, p0, kc) },
                (true, 12) => unsafe { copy_steps::<12>(panel, a, i, p0, kc) },
                (true, 16) => unsafe { copy_steps::<16>(panel, a, i, p0, kc) },
                (true, 32) => unsafe { copy_steps::<32>(panel, a, i, p0, kc) },
                _ => {
                    for (p, d) in panel.chunks_exact_mut(mr_).enumerate() {
                        // SAFETY: rows i..i+rows of column p0+p are inside A and contiguous.
                        let src = unsafe { std::slice::from_raw_parts(a.addr(i, p0 + p), rows) };
                        d[..rows].copy_from_slice(src);
                        d[rows..].fill(0.0);
                    }
                }
            }
        } else if unit(kc, a.cs) {
            // SAFETY: `K` is only used when the CPU has its instruction set; rows i..i+rows,
            // columns p0..p0+kc are inside A, each row contiguous.
            if unsafe { K::PACK.lines(panel, a.addr(i, p0), a.rs, rows, mr_, kc) } {
                continue;
            }
            // Row-major A: read each row contiguously, write it with stride MR.
            for ii in 0..rows {
                // SAFETY: columns p0..p0+kc of row i+ii are inside A and contiguous.
                let src = unsafe { std::slice::from_raw_parts(a.addr(i + ii, p0), kc) };
                for (d, &s) in panel[ii..].iter_mut().step_by(mr_).zip(src) {
                    *d = s;
                }
            }
            for d in panel.chunks_exact_mut(mr_) {
                d[rows..].fill(0.0);
            }
        } else {
            for (p, d) in panel.chunks_exact_mut(mr_).enumerate() {
                for (ii, d) in d.iter_mut().enumerate() {
                    // SAFETY: (i+ii, p0+p) is inside A whenever ii < rows.
                    *d = if ii < rows { unsafe { a.at(i + ii, p0 + p) } } else { 0.0 };
                }
            }
        }
    }
}

/// panel[p*W .. p*W + W] = the W contiguous floats at `a.addr(i, p0 + p)`, for p < kc.
///
/// # Safety
/// Those kc runs of W floats are inside A; `panel` holds at least kc·W floats.
#[inline(always)]
unsafe fn copy_steps<const W: usize>(panel: &mut [f32], a: Mat, i: usize, p0: usize, kc: usize) {
    assert!(panel.len() >= kc * W);
    let d = panel.as_mut_ptr().cast::<[f32; W]>();
    for p in 0..kc {
        // SAFETY: the caller's contract; both sides are W floats (unaligned).
        unsafe { d.add(p).write_unaligned(a.addr(i, p0 + p).cast::<[f32; W]>().read_unaligned()) };
    }
}

/// Which transposing copy packs a panel whose lines are contiguous along k.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pack {
    /// One strided scalar store per element.
    Scalar,
    /// 8 × 8 register transposes (`x86::pack_lines_avx2`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// 16 × 16 register transposes (`x86::pack_lines_avx512`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Pack {
    /// The panel copy of `x86::pack_lines_*` (`lines` lines at `src + l*ld`, kc contiguous
    /// floats each, into a panel of width w) with this instruction set; false, copying
    /// nothing, for `Scalar`, whose copy the caller writes.
    ///
    /// # Safety
    /// The CPU has the instruction set; as for `x86::pack_lines_avx512` otherwise.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    unsafe fn lines(self, dst: &mut [f32], src: *const f32, ld: isize, lines: usize, w: usize, kc: usize) -> bool {
        match self {
            Pack::Scalar => false,
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller's contract.
            Pack::Avx2 => {
                unsafe { x86::pack_lines_avx2(dst, src, ld, lines, w, kc) };
                true
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller's contract.
            Pack::Avx512 => {
                unsafe { x86::pack_lines_avx512(dst, src, ld, lines, w, kc) };
                true
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// Stores a finished tile `t` (row stride `ld`) into an arbitrary-stride or partial C tile.
///
/// # Safety
/// As for [`Kernel::tile`]: the mr × nr tile at `c` is valid and exclusively ours.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn store_tile(
    t: &[f32],
    ld: usize,
    alpha: f32,
    beta: f32,
    c: *mut f32,
    rs: isize,
    cs: isize,
    mr: usize,
    nr: usize,
) {
    for i in 0..mr {
        for j in 0..nr {
            let dst = c.offset(i as isize * rs + j as isize * cs);
            let v = alpha * t[i * ld + j];
            *dst = if beta == 0.0 { v } else { v + beta * *dst };
        }
    }
}

/// Plain Rust; a 4 × 8 tile of independent sums is what auto-vectorisers turn into SIMD on
/// any target (SSE2, NEON, ...).
struct Portable;

impl Kernel for Portable {
    const MR: usize = 4;
    const NR: usize = 8;
    const KC: usize = 256;
    const MC: usize = 128;
    const NC: usize = 2048;

    unsafe fn tile(
        kc: usize,
        a: *const f32,
        b: *const f32,
        alpha: f32,
        beta: f32,
        c: *mut f32,
        rs: isize,
        cs: isize,
        mr: usize,
        nr: usize,
    ) {
        const MR: usize = Portable::MR;
        const NR: usize = Portable::NR;
        let a = std::slice::from_raw_parts(a, kc * MR);
        let b = std::slice::from_raw_parts(b, kc * NR);
        let mut acc = [0.0f32; MR * NR];
        for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            for i in 0..MR {
                for j in 0..NR {
                    acc[i * NR + j] += ap[i] * bp[j];
                }
            }
        }
        store_tile(&acc, NR, alpha, beta, c, rs, cs, mr, nr);
    }
}

// ---------------------------------------------------------------------------------------------
// Rank-1 update and GEMV
// ---------------------------------------------------------------------------------------------

/// c = alpha * a ⊗ b + beta * c (the k = 1 product).
fn rank1(isa: Isa, alpha: f32, a: ArrayView1<f32>, b: ArrayView1<f32>, beta: f32, mut c: ArrayViewMut2<f32>) {
    let bs = b.as_slice();
    #[cfg(target_arch = "x86_64")]
    if let (Isa::Avx512, Some(bs), true) = (isa, bs, unit(c.ncols(), c.strides()[1])) {
        let cm = MatMut { ptr: c.as_mut_ptr(), rs: c.strides()[0], cs: 1 };
        // SAFETY: AVX-512F is present (`isa` is clamped); `cm` is c, whose rows are contiguous
        // and as long as `bs`.
        return unsafe { x86::rank1_avx512(alpha, a, bs, beta, cm) };
    }
    for (mut row, &ai) in c.rows_mut().into_iter().zip(a.iter()) {
        let s = alpha * ai;
        match (row.as_slice_mut(), bs) {
            (Some(row), Some(bs)) => axpby(isa, s, bs, beta, row),
            (_, _) => row.zip_mut_with(&b, |cv, &bv| *cv = if beta == 0.0 { s * bv } else { s * bv + beta * *cv }),
        }
    }
}

/// y = s * x + beta * y over contiguous slices.
fn axpby(isa: Isa, s: f32, x: &[f32], beta: f32, y: &mut [f32]) {
    match isa {
        // SAFETY: `isa` never exceeds what the CPU supports (`Isa::clamp`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => unsafe { x86::axpby_avx2(s, x, beta, y) },
        _ => axpby_body::<false>(s, x, beta, y),
    }
}

/// Plain loops, inlined into per-instruction-set wrappers so each gets its own vector width.
#[inline(always)]
fn axpby_body<const FMA: bool>(s: f32, x: &[f32], beta: f32, y: &mut [f32]) {
    if beta == 0.0 {
        y.iter_mut().zip(x).for_each(|(y, &x)| *y = s * x);
    } else if beta == 1.0 {
        y.iter_mut().zip(x).for_each(|(y, &x)| *y = fma::<FMA>(s, x, *y));
    } else {
        y.iter_mut().zip(x).for_each(|(y, &x)| *y = fma::<FMA>(s, x, beta * *y));
    }
}

/// x * y + z, fused when the instruction set has FMA (a libm call otherwise, hence the flag).
#[inline(always)]
fn fma<const FMA: bool>(x: f32, y: f32, z: f32) -> f32 {
    if FMA {
        x.mul_add(y, z)
    } else {
        x * y + z
    }
}

fn gemv_with(isa: Isa, alpha: f32, a: ArrayView2<f32>, x: ArrayView1<f32>, beta: f32, mut y: ArrayViewMut1<f32>) {
    let isa = isa.clamp();
    let (m, k) = a.dim();
    assert!(x.len() == k && y.len() == m, "gemv: shapes {:?} @ {} -> {}", a.dim(), x.len(), y.len());
    if m == 0 {
        return;
    }
    if k == 0 || alpha == 0.0 {
        scale(beta, y.view_mut().into_dyn());
        return;
    }
    let am = Mat::of(&a);
    let yv = MatMut { ptr: y.as_mut_ptr(), rs: y.strides()[0], cs: 0 };
    if unit(k, am.cs) {
        // Rows of A contiguous: one dot product per element of y.
        match x.as_slice() {
            Some(xs) => gemv_dot(isa, m, k, am, xs, alpha, beta, yv),
            None => with_scratch(k, |xs| {
                xs.iter_mut().zip(x.iter()).for_each(|(d, &s)| *d = s);
                gemv_dot(isa, m, k, am, xs, alpha, beta, yv)
            }),
        }
    } else if unit(m, am.rs) {
        // Columns of A contiguous: y accumulates x[p] * column p.
        let xv = Mat { ptr: x.as_ptr(), rs: x.strides()[0], cs: 0 };
        gemv_axpy(isa, m, k, am, xv, alpha, beta, yv);
    } else {
        for (row, yi) in a.rows().into_iter().zip(y.iter_mut()) {
            let s = alpha * row.iter().zip(x.iter()).map(|(&a, &x)| a * x).sum::<f32>();
            *yi = if beta == 0.0 { s } else { s + beta * *yi };
        }
    }
}

/// y[i] = alpha * dot(A[i, :], x) + beta * y[i], A with contiguous rows.
#[allow(clippy::too_many_arguments)]
fn gemv_dot(isa: Isa, m: usize, k: usize, a: Mat, x: &[f32], alpha: f32, beta: f32, y: MatMut) {
    // SAFETY (all arms): `a` and `y` come from views of shape m × k and m; `isa` is supported.
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::gemv_dot_avx512(m, k, a, x, alpha, beta, y) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::gemv_dot_avx2(m, k, a, x, alpha, beta, y) },
        _ => unsafe { gemv_dot_portable::<false>(m, k, a, x, alpha, beta, y) },
    }
}

/// y = alpha * A x + beta * y, A with contiguous columns.
#[allow(clippy::too_many_arguments)]
fn gemv_axpy(isa: Isa, m: usize, k: usize, a: Mat, x: Mat, alpha: f32, beta: f32, y: MatMut) {
    // SAFETY (all arms): `a`, `x` and `y` come from views of shape m × k, k and m; `isa` is
    // supported.
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::gemv_axpy_avx512(m, k, a, x, alpha, beta, y) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::gemv_axpy_avx2(m, k, a, x, alpha, beta, y) },
        _ => unsafe { gemv_axpy_portable::<false>(m, k, a, x, alpha, beta, y) },
    }
}

/// # Safety
/// `a` is an m × k matrix with unit column stride, `y` an m-vector, both inside live views.
#[inline(always)]
unsafe fn gemv_dot_portable<const FMA: bool>(m: usize, k: usize, a: Mat, x: &[f32], alpha: f32, beta: f32, y: MatMut) {
    const L: usize = 16;
    for i in 0..m {
        let row = std::slice::from_raw_parts(a.addr(i, 0), k);
        // Independent lanes: the compiler may vectorise them without reassociating one sum.
        let mut acc = [0.0f32; L];
        let (rc, xc) = (row.chunks_exact(L), x.chunks_exact(L));
        let tail: f32 = rc.remainder().iter().zip(xc.remainder()).map(|(&a, &x)| a * x).sum();
        for (r, xv) in rc.zip(xc) {
            for l in 0..L {
                acc[l] = fma::<FMA>(r[l], xv[l], acc[l]);
            }
        }
        let d = acc.iter().sum::<f32>() + tail;
        store_y(y, i, alpha * d, beta);
    }
}

/// # Safety
/// `a` is an m × k matrix with unit row stride, `x` a k-vector (row stride = its stride),
/// `y` an m-vector, all inside live views.
#[inline(always)]
unsafe fn gemv_axpy_portable<const FMA: bool>(m: usize, k: usize, a: Mat, x: Mat, alpha: f32, beta: f32, y: MatMut) {
    const B: usize = 64;
    for i0 in (0..m).step_by(B) {
        let rows = B.min(m - i0);
        let mut acc = [0.0f32; B];
        for p in 0..k {
            let xp = x.at(p, 0);
            let col = std::slice::from_raw_parts(a.addr(i0, p), rows);
            for (s, &v) in acc.iter_mut().zip(col) {
                *s = fma::<FMA>(v, xp, *s);
            }
        }
        for (ii, &s) in acc[..rows].iter().enumerate() {
            store_y(y, i0 + ii, alpha * s, beta);
        }
    }
}

/// y[i] = v + beta * y[i] (beta == 0 ignores the old value, even NaN).
///
/// # Safety
/// i is inside the vector `y` was made from.
#[inline(always)]
unsafe fn store_y(y: MatMut, i: usize, v: f32, beta: f32) {
    let p = y.addr(i, 0);
    *p = if beta == 0.0 { v } else { v + beta * *p };
}

// ---------------------------------------------------------------------------------------------
// x86-64 kernels
// ---------------------------------------------------------------------------------------------

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{store_tile, Kernel, Mat, MatMut};
    use std::arch::x86_64::*;

    // Plain-Rust bodies compiled for wider vectors. `inline(always)` on the bodies makes them
    // part of these functions, so they are vectorised with the enabled features.

    /// c[i, :] = alpha * a[i] * b + beta * c[i, :] for every row: the k = 1 product, one
    /// call for the whole matrix so short rows pay no per-row dispatch.
    ///
    /// # Safety
    /// The CPU supports AVX-512F and FMA; `c` has a.len() rows of b.len() contiguous floats.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn rank1_avx512(alpha: f32, a: ndarray::ArrayView1<f32>, b: &[f32], beta: f32, c: MatMut) {
        #[inline(always)]
        unsafe fn rows<const MODE: u8>(alpha: f32, a: ndarray::ArrayView1<f32>, b: &[f32], beta: f32, c: MatMut) {
            for (i, &ai) in a.iter().enumerate() {
                axpby::<MODE>(alpha * ai, b.as_ptr(), beta, c.addr(i, 0), b.len());
            }
        }
        match beta {
            0.0 => rows::<0>(alpha, a, b, beta, c),
            1.0 => rows::<1>(alpha, a, b, beta, c),
            _ => rows::<2>(alpha, a, b, beta, c),
        }
    }

    /// y = s * x + beta * y; MODE 0: beta = 0 (y not read), 1: beta = 1, 2: any other beta.
    #[inline(always)]
    unsafe fn axpby<const MODE: u8>(s: f32, xp: *const f32, beta: f32, yp: *mut f32, n: usize) {
        let (vs, vb) = (_mm512_set1_ps(s), _mm512_set1_ps(beta));
        let step = |xv, yv| match MODE {
            0 => _mm512_mul_ps(vs, xv),
            1 => _mm512_fmadd_ps(vs, xv, yv),
            _ => _mm512_fmadd_ps(vs, xv, _mm512_mul_ps(vb, yv)),
        };
        let mut i = 0;
        while i + 16 <= n {
            let yv = if MODE == 0 { _mm512_setzero_ps() } else { _mm512_loadu_ps(yp.add(i)) };
            _mm512_storeu_ps(yp.add(i), step(_mm512_loadu_ps(xp.add(i)), yv));
            i += 16;
        }
        // Scalar, not a masked vector: the next row of C often starts in the same cache
        // line, and a load that overlaps a pending masked store cannot be forwarded from it
        // (a stall of tens of cycles per row).
        for i in i..n {
            let (x, y) = (*xp.add(i), yp.add(i));
            *y = match MODE {
                0 => s * x,
                1 => s.mul_add(x, *y),
                _ => s.mul_add(x, beta * *y),
            };
        }
    }

    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn axpby_avx2(s: f32, x: &[f32], beta: f32, y: &mut [f32]) {
        super::axpby_body::<true>(s, x, beta, y)
    }

    /// # Safety
    /// The CPU supports AVX2 and FMA; otherwise as `gemv_dot_portable`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemv_dot_avx2(m: usize, k: usize, a: Mat, x: &[f32], alpha: f32, beta: f32, y: MatMut) {
        super::gemv_dot_portable::<true>(m, k, a, x, alpha, beta, y)
    }

    /// # Safety
    /// The CPU supports AVX2 and FMA; otherwise as `gemv_axpy_portable`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemv_axpy_avx2(m: usize, k: usize, a: Mat, x: Mat, alpha: f32, beta: f32, y: MatMut) {
        super::gemv_axpy_portable::<true>(m, k, a, x, alpha, beta, y)
    }

    /// 12 × 32 tiles: 24 zmm accumulators, two B vectors per step, A broadcast from memory —
    /// enough independent FMAs to cover the 4-cycle latency on both FMA pipes.
    pub(super) struct Avx512;

    impl Kernel for Avx512 {
        const MR: usize = 12;
        const NR: usize = 32;
        const KC: usize = 256;
        const MC: usize = 192;
        const NC: usize = 4096;
        const PACK: super::Pack = super::Pack::Avx512;

        unsafe fn tile(
            kc: usize,
            a: *const f32,
            b: *const f32,
            alpha: f32,
            beta: f32,
            c: *mut f32,
            rs: isize,
            cs: isize,
            mr: usize,
            nr: usize,
        ) {
            tile_avx512::<12, 2>(kc, a, b, alpha, beta, c, rs, cs, mr, nr)
        }
    }

    /// MR × (16·NV) AVX-512 tile; see [`Kernel::tile`] for the contract.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn tile_avx512<const MR: usize, const NV: usize>(
        kc: usize,
        a: *const f32,
        b: *const f32,
        alpha: f32,
        beta: f32,
        c: *mut f32,
        rs: isize,
        cs: isize,
        mr: usize,
        nr: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        for p in 0..kc {
            let bp = b.add(p * NV * 16);
            let mut bv = [_mm512_setzero_ps(); NV];
            for (v, bv) in bv.iter_mut().enumerate() {
                *bv = _mm512_loadu_ps(bp.add(v * 16));
            }
            let ap = a.add(p * MR);
            for (i, acc) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*ap.add(i));
                for v in 0..NV {
                    acc[v] = _mm512_fmadd_ps(ai, bv[v], acc[v]);
                }
            }
        }
        let va = _mm512_set1_ps(alpha);
        if cs == 1 {
            // Masked loads and stores never touch the lanes past nr, so partial tiles of a
            // row-major C need no copy.
            let mut mask = [0u16; NV];
            for (v, m) in mask.iter_mut().enumerate() {
                let cnt = nr.saturating_sub(v * 16).min(16);
                *m = ((1u32 << cnt) - 1) as u16;
            }
            let vb = _mm512_set1_ps(beta);
            for (i, acc) in acc.iter().enumerate() {
                if i < mr {
                    let row = c.wrapping_offset(i as isize * rs);
                    for v in 0..NV {
                        let dst = row.wrapping_add(v * 16);
                        let mut r = _mm512_mul_ps(va, acc[v]);
                        if beta != 0.0 {
                            r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], dst), r);
                        }
                        _mm512_mask_storeu_ps(dst, mask[v], r);
                    }
                }
            }
        } else {
            const { assert!(MR * NV * 16 <= 512) };
            let mut t = [0.0f32; 512];
            for (i, acc) in acc.iter().enumerate() {
                for (v, &x) in acc.iter().enumerate() {
                    _mm512_storeu_ps(t.as_mut_ptr().add(i * NV * 16 + v * 16), x);
                }
            }
            store_tile(&t, NV * 16, alpha, beta, c, rs, cs, mr, nr);
        }
    }

    /// Transposes 16 rows of 16 floats in registers: afterwards r[q] holds what was column q.
    #[inline(always)]
    unsafe fn transpose16(r: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for i in 0..4 {
            let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
            r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
            r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
            r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
            r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
        }
        // r[4i + j] now holds column j of each 128-bit lane of rows 4i..4i+4.
        for h in 0..2 {
            for j in 0..4 {
                t[8 * h + j] = _mm512_shuffle_f32x4::<0x88>(r[8 * h + j], r[8 * h + 4 + j]);
                t[8 * h + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(r[8 * h + j], r[8 * h + 4 + j]);
            }
        }
        for j in 0..8 {
            r[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]);
            r[8 + j] = _mm512_shuffle_f32x4::<0xdd>(t[j], t[8 + j]);
        }
    }

    /// The steps `steps` of `pack_lines_*`'s panel one element at a time (those past the last
    /// whole block of the register transposes).
    ///
    /// # Safety
    /// As for the `pack_lines_*` calling it: `d` holds `w` floats per step of the panel, and
    /// every line l < lines is valid for reads at the steps.
    #[inline(always)]
    unsafe fn pack_steps_scalar(
        d: *mut f32,
        src: *const f32,
        ld: isize,
        lines: usize,
        w: usize,
        steps: std::ops::Range<usize>,
    ) {
        for p in steps {
            for l in 0..w {
                *d.add(p * w + l) = if l < lines { *src.offset(l as isize * ld).add(p) } else { 0.0 };
            }
        }
    }

    /// Copies `lines` strided lines (line l at `src + l*ld`, kc contiguous floats each) into a
    /// panel of width w: dst[p*w + l] = line l at p, zero for l >= lines. A 16 × 16 register
    /// transpose per block instead of one scalar store per element.
    ///
    /// # Safety
    /// The CPU has AVX-512F; every line l < lines is valid for kc reads.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_lines_avx512(
        dst: &mut [f32],
        src: *const f32,
        ld: isize,
        lines: usize,
        w: usize,
        kc: usize,
    ) {
        assert!(dst.len() >= w * kc && lines <= w);
        let d = dst.as_mut_ptr();
        let full = kc / 16 * 16;
        for g in (0..w).step_by(16) {
            let store = ((1u32 << (w - g).min(16)) - 1) as u16;
            let have = lines.saturating_sub(g).min(16);
            for p in (0..full).step_by(16) {
                let mut r = [_mm512_setzero_ps(); 16];
                for (l, r) in r.iter_mut().enumerate() {
                    // Lines past the matrix load nothing (mask 0) and become zero padding.
                    let m = if l < have { 0xffff } else { 0 };
                    *r = _mm512_maskz_loadu_ps(m, src.wrapping_offset((g + l) as isize * ld).wrapping_add(p));
                }
                transpose16(&mut r);
                for (q, &r) in r.iter().enumerate() {
                    _mm512_mask_storeu_ps(d.add((p + q) * w + g), store, r);
                }
            }
        }
        pack_steps_scalar(d, src, ld, lines, w, full..kc);
    }

    /// The unpacked product for small problems (see `SMALL_MAX_MNK`): column blocks of up to 64
    /// (four masked vectors) times four rows of A at a time.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `p` describes live views; B and C have unit column stride.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn small_avx512(p: super::Problem) {
        for q in column_blocks(p, 64) {
            // Every group of rows reads the whole block of B again. With B's rows 512 bytes
            // apart or more (a 128-column B), the block's lines fall in half of L1's sets or
            // fewer and spill to L2 (an Intel core's 48 KB L1: [64, 128, 128] batches ran at
            // 63% of a large product's GFLOP/s); copied with rows 64 floats apart, the block
            // covers every set. A copy is k · 64 floats against m · k · 64 FMAs.
            if q.m >= 16 && q.b.rs > 64 {
                // SAFETY: as for the call below, with B the copy.
                with_copied_block(&q, 64, |q| unsafe { small_block_avx512(q) });
            } else {
                small_block_avx512(q);
            }
        }
    }

    /// `f` on the column block `q` with B replaced by a copy of its q.n columns whose rows are
    /// `stride` floats apart (`stride` ≥ q.n; the rest of each row zero), in the PANEL buffer.
    #[inline(always)]
    fn with_copied_block<R>(q: &super::Problem, stride: usize, f: impl FnOnce(super::Problem) -> R) -> R {
        super::with_panel(q.k * stride, |panel| {
            for (k, d) in panel.chunks_exact_mut(stride).enumerate() {
                // SAFETY: row k of this block of B holds q.n contiguous floats.
                d[..q.n].copy_from_slice(unsafe { std::slice::from_raw_parts(q.b.addr(k, 0), q.n) });
                d[q.n..].fill(0.0);
            }
            f(super::Problem { b: Mat { ptr: panel.as_ptr(), rs: stride as isize, cs: 1 }, ..*q })
        })
    }

    /// One column block (at most 64 wide) of `small_avx512`.
    #[inline(always)]
    unsafe fn small_block_avx512(q: super::Problem) {
        match q.n.div_ceil(16) {
            1 => small_cols::<1>(q),
            2 => small_cols::<2>(q),
            3 => small_cols::<3>(q),
            _ => small_cols::<4>(q),
        }
    }

    /// The blocks of at most `width` columns of B and C, left to right, as problems of their own.
    #[inline(always)]
    fn column_blocks(p: super::Problem, width: usize) -> impl Iterator<Item = super::Problem> {
        (0..p.n).step_by(width).map(move |j0| super::Problem {
            n: (p.n - j0).min(width),
            b: Mat { ptr: p.b.addr(0, j0), ..p.b },
            c: MatMut { ptr: p.c.addr(0, j0), ..p.c },
            ..p
        })
    }

    #[inline(always)]
    unsafe fn small_cols<const NV: usize>(p: super::Problem) {
        let mask: [u16; NV] = std::array::from_fn(|v| ((1u32 << p.n.saturating_sub(v * 16).min(16)) - 1) as u16);
        // At least twelve accumulators in flight, whatever the width: a narrow C (n = 10)
        // would otherwise wait on FMA latency.
        let mut i = 0;
        match NV {
            1 => i = small_rows_while::<12, NV>(&p, i, &mask),
            2 => i = small_rows_while::<6, NV>(&p, i, &mask),
            _ => {}
        }
        i = small_rows_while::<4, NV>(&p, i, &mask);
        i = small_rows_while::<2, NV>(&p, i, &mask);
        small_rows_while::<1, NV>(&p, i, &mask);
    }

    /// Blocks of R rows from row i on while R rows remain; returns the first row not done.
    #[inline(always)]
    unsafe fn small_rows_while<const R: usize, const NV: usize>(
        p: &super::Problem,
        mut i: usize,
        mask: &[u16; NV],
    ) -> usize {
        while i + R <= p.m {
            small_rows::<R, NV>(p, i, mask);
            i += R;
        }
        i
    }

    #[inline(always)]
    unsafe fn small_rows<const R: usize, const NV: usize>(p: &super::Problem, i: usize, mask: &[u16; NV]) {
        let mut acc = [[_mm512_setzero_ps(); NV]; R];
        for k in 0..p.k {
            let row = p.b.addr(k, 0);
            let bv: [__m512; NV] = std::array::from_fn(|v| _mm512_maskz_loadu_ps(mask[v], row.wrapping_add(v * 16)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let ar = _mm512_set1_ps(p.a.at(i + r, k));
                for v in 0..NV {
                    acc[v] = _mm512_fmadd_ps(ar, bv[v], acc[v]);
                }
            }
        }
        let (va, vb) = (_mm512_set1_ps(p.alpha), _mm512_set1_ps(p.beta));
        for (r, acc) in acc.iter().enumerate() {
            let row = p.c.addr(i + r, 0);
            for v in 0..NV {
                let dst = row.wrapping_add(v * 16);
                let mut x = _mm512_mul_ps(va, acc[v]);
                if p.beta != 0.0 {
                    x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], dst), x);
                }
                _mm512_mask_storeu_ps(dst, mask[v], x);
            }
        }
    }

    /// Transposes 8 rows of 8 floats in registers: afterwards r[q] holds what was column q.
    #[inline(always)]
    unsafe fn transpose8(r: &mut [__m256; 8]) {
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // t[2i] = rows 2i, 2i+1 interleaved at columns 0, 1 | 4, 5; t[2i+1] at 2, 3 | 6, 7.
        let mut u = [_mm256_setzero_ps(); 8];
        for h in 0..2 {
            let (lo, hi) = (t[4 * h], t[4 * h + 1]);
            let (lo2, hi2) = (t[4 * h + 2], t[4 * h + 3]);
            u[4 * h] = _mm256_shuffle_ps::<0x44>(lo, lo2);
            u[4 * h + 1] = _mm256_shuffle_ps::<0xee>(lo, lo2);
            u[4 * h + 2] = _mm256_shuffle_ps::<0x44>(hi, hi2);
            u[4 * h + 3] = _mm256_shuffle_ps::<0xee>(hi, hi2);
        }
        // u[4h + j] = column j (low half) and column j + 4 (high half) of rows 4h..4h+4.
        for j in 0..4 {
            r[j] = _mm256_permute2f128_ps::<0x20>(u[j], u[4 + j]);
            r[4 + j] = _mm256_permute2f128_ps::<0x31>(u[j], u[4 + j]);
        }
    }

    /// `pack_lines_avx512` with 8 × 8 register transposes. A store of a group narrower than 8
    /// (A's 6-row panels) writes its 8 lanes anyway where the extra lanes land on positions a
    /// later store (or the tail loop) rewrites, and through a copy only at the panel's end.
    ///
    /// # Safety
    /// The CPU has AVX2; every line l < lines is valid for kc reads.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_lines_avx2(
        dst: &mut [f32],
        src: *const f32,
        ld: isize,
        lines: usize,
        w: usize,
        kc: usize,
    ) {
        assert!(dst.len() >= w * kc && lines <= w);
        let d = dst.as_mut_ptr();
        let full = kc / 8 * 8;
        for g in (0..w).step_by(8) {
            let width = (w - g).min(8);
            let have = lines.saturating_sub(g).min(8);
            for p in (0..full).step_by(8) {
                let mut r = [_mm256_setzero_ps(); 8];
                for (l, r) in r.iter_mut().enumerate().take(have) {
                    *r = _mm256_loadu_ps(src.offset((g + l) as isize * ld).add(p));
                }
                transpose8(&mut r);
                for (q, &r) in r.iter().enumerate() {
                    let at = (p + q) * w + g;
                    // With one group (w <= 8), the lanes past `width` fall on the next steps,
                    // which are stored after this one; with several, on another group's.
                    if width == 8 || (w <= 8 && at + 8 <= w * kc) {
                        _mm256_storeu_ps(d.add(at), r);
                    } else {
                        let mut t = [0.0f32; 8];
                        _mm256_storeu_ps(t.as_mut_ptr(), r);
                        std::ptr::copy_nonoverlapping(t.as_ptr(), d.add(at), width);
                    }
                }
            }
        }
        pack_steps_scalar(d, src, ld, lines, w, full..kc);
    }

    /// The unpacked product for small problems on AVX2 (see `SMALL_MAX_MNK`): column blocks
    /// of 16 (two 8-float vectors) times six rows of A at a time — 12 accumulators, two B
    /// vectors and A's broadcast fill 15 of the 16 ymm registers, so nothing spills. A last
    /// block narrower than a whole number of vectors reads B through a zero-padded copy (no
    /// masks held in registers) and stores C through a copy.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `p` describes live views; B and C have unit column stride.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn small_avx2(p: super::Problem) {
        for q in column_blocks(p, 16) {
            let w = q.n;
            if w.is_multiple_of(8) {
                small_block_avx2(q);
            } else {
                // SAFETY: as for the call above, with B the padded copy.
                with_copied_block(&q, w.next_multiple_of(8), |q| unsafe { small_block_avx2(q) });
            }
        }
    }

    /// One block of at most 16 columns: whole 8-float vectors of B are readable (p.n rounded
    /// up to 8), C is written only in its p.n columns.
    #[inline(always)]
    unsafe fn small_block_avx2(p: super::Problem) {
        if p.n > 8 {
            small_rows_while_avx2::<6, 2>(&p, 0);
        } else {
            small_rows_while_avx2::<8, 1>(&p, 0);
        }
    }

    /// Blocks of R rows from row i on, then of 2 and of 1.
    #[inline(always)]
    unsafe fn small_rows_while_avx2<const R: usize, const NV: usize>(p: &super::Problem, mut i: usize) {
        while i + R <= p.m {
            small_rows_avx2::<R, NV>(p, i);
            i += R;
        }
        while i + 2 <= p.m {
            small_rows_avx2::<2, NV>(p, i);
            i += 2;
        }
        if i < p.m {
            small_rows_avx2::<1, NV>(p, i);
        }
    }

    #[inline(always)]
    unsafe fn small_rows_avx2<const R: usize, const NV: usize>(p: &super::Problem, i: usize) {
        let mut acc = [[_mm256_setzero_ps(); NV]; R];
        for k in 0..p.k {
            let row = p.b.addr(k, 0);
            let bv: [__m256; NV] = std::array::from_fn(|v| _mm256_loadu_ps(row.wrapping_add(v * 8)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let ar = _mm256_set1_ps(p.a.at(i + r, k));
                for v in 0..NV {
                    acc[v] = _mm256_fmadd_ps(ar, bv[v], acc[v]);
                }
            }
        }
        let (va, vb) = (_mm256_set1_ps(p.alpha), _mm256_set1_ps(p.beta));
        for (r, acc) in acc.iter().enumerate() {
            let row = p.c.addr(i + r, 0);
            for (v, &acc) in acc.iter().enumerate() {
                let dst = row.wrapping_add(v * 8);
                let lanes = p.n.saturating_sub(v * 8).min(8);
                let mut t = [0.0f32; 8];
                let whole = lanes == 8;
                if !whole {
                    std::ptr::copy_nonoverlapping(dst, t.as_mut_ptr(), lanes);
                }
                let at = if whole { dst } else { t.as_mut_ptr() };
                let mut x = _mm256_mul_ps(va, acc);
                if p.beta != 0.0 {
                    x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(at), x);
                }
                _mm256_storeu_ps(at, x);
                if !whole {
                    std::ptr::copy_nonoverlapping(t.as_ptr(), dst, lanes);
                }
            }
        }
    }

    /// 6 × 16 tiles: 12 ymm accumulators of the 16 registers.
    pub(super) struct Avx2;

    impl Kernel for Avx2 {
        const MR: usize = 6;
        const NR: usize = 16;
        const KC: usize = 256;
        const MC: usize = 144;
        const NC: usize = 4096;
        const PACK: super::Pack = super::Pack::Avx2;

        #[target_feature(enable = "avx2,fma")]
        unsafe fn tile(
            kc: usize,
            a: *const f32,
            b: *const f32,
            alpha: f32,
            beta: f32,
            c: *mut f32,
            rs: isize,
            cs: isize,
            mr: usize,
            nr: usize,
        ) {
            const MR: usize = 6;
            let mut acc = [[_mm256_setzero_ps(); 2]; MR];
            for p in 0..kc {
                let b0 = _mm256_loadu_ps(b.add(p * 16));
                let b1 = _mm256_loadu_ps(b.add(p * 16 + 8));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let ai = _mm256_broadcast_ss(&*a.add(p * MR + i));
                    acc[0] = _mm256_fmadd_ps(ai, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(ai, b1, acc[1]);
                }
            }
            if cs == 1 && mr == MR && nr == 16 {
                let (va, vb) = (_mm256_set1_ps(alpha), _mm256_set1_ps(beta));
                for (i, acc) in acc.iter().enumerate() {
                    let row = c.offset(i as isize * rs);
                    for (v, &acc) in acc.iter().enumerate() {
                        let dst = row.add(v * 8);
                        let mut r = _mm256_mul_ps(va, acc);
                        if beta != 0.0 {
                            r = _mm256_fmadd_ps(vb, _mm256_loadu_ps(dst), r);
                        }
                        _mm256_storeu_ps(dst, r);
                    }
                }
            } else {
                let mut t = [0.0f32; MR * 16];
                for (i, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(t.as_mut_ptr().add(i * 16), acc[0]);
                    _mm256_storeu_ps(t.as_mut_ptr().add(i * 16 + 8), acc[1]);
                }
                store_tile(&t, 16, alpha, beta, c, rs, cs, mr, nr);
            }
        }
    }

    /// Row-major gemv: eight rows at a time, so eight independent FMA chains share each load of
    /// x; see `gemv_dot` for the contract.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn gemv_dot_avx512(m: usize, k: usize, a: Mat, x: &[f32], alpha: f32, beta: f32, y: MatMut) {
        const R: usize = 8;
        let full = k / 16;
        let tail = (1u32 << (k % 16)) as u16 - 1;
        let xp = x.as_ptr();
        let mut i = 0;
        while i + R <= m {
            let mut acc = [_mm512_setzero_ps(); R];
            let rows: [*const f32; R] = std::array::from_fn(|r| a.addr(i + r, 0));
            for q in 0..full {
                let xv = _mm512_loadu_ps(xp.add(q * 16));
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[r].add(q * 16)), xv, acc[r]);
                }
            }
            if tail != 0 {
                let xv = _mm512_maskz_loadu_ps(tail, xp.add(full * 16));
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, rows[r].add(full * 16)), xv, acc[r]);
                }
            }
            let sums = hsum8(&acc);
            for (r, &d) in sums.iter().enumerate() {
                super::store_y(y, i + r, alpha * d, beta);
            }
            i += R;
        }
        while i < m {
            let row = a.addr(i, 0);
            let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            let mut q = 0;
            while q + 2 <= full {
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(q * 16)), _mm512_loadu_ps(xp.add(q * 16)), s0);
                s1 = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(q * 16 + 16)), _mm512_loadu_ps(xp.add(q * 16 + 16)), s1);
                q += 2;
            }
            if q < full {
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(q * 16)), _mm512_loadu_ps(xp.add(q * 16)), s0);
            }
            if tail != 0 {
                let xv = _mm512_maskz_loadu_ps(tail, xp.add(full * 16));
                s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, row.add(full * 16)), xv, s1);
            }
            super::store_y(y, i, alpha * _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)), beta);
            i += 1;
        }
    }

    /// The eight horizontal sums of `v`, as a tree of shuffles shared by all eight (a third of
    /// the work of eight separate reductions, which dominate when rows are short).
    #[inline(always)]
    unsafe fn hsum8(v: &[__m512; 8]) -> [f32; 8] {
        // Pairs: per 128-bit lane, [x0+x2, y0+y2, x1+x3, y1+y3].
        let pair = |x, y| _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
        let (t0, t1, t2, t3) = (pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
        // Quads: per 128-bit lane, the lane's sum of each of four vectors.
        let quad = |x, y| {
            let (x, y) = (_mm512_castps_pd(x), _mm512_castps_pd(y));
            _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)))
        };
        let (u0, u1) = (quad(t0, t1), quad(t2, t3));
        // Lanes [u0.0+u0.1, u0.2+u0.3, u1.0+u1.1, u1.2+u1.3], then fold neighbouring lanes.
        let w = _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(u0, u1), _mm512_shuffle_f32x4::<0xdd>(u0, u1));
        let w = _mm512_add_ps(w, _mm512_shuffle_f32x4::<0xb1>(w, w));
        let mut out = [0.0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), w);
        [out[0], out[1], out[2], out[3], out[8], out[9], out[10], out[11]]
    }

    /// Column-major gemv: a 128-row block of y lives in eight zmm registers while every column
    /// streams past; see `gemv_axpy` for the contract.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn gemv_axpy_avx512(m: usize, k: usize, a: Mat, x: Mat, alpha: f32, beta: f32, y: MatMut) {
        const V: usize = 8;
        let mut out = [0.0f32; V * 16];
        let mut i0 = 0;
        while i0 + V * 16 <= m {
            let mut acc = [_mm512_setzero_ps(); V];
            for p in 0..k {
                let xp = _mm512_set1_ps(x.at(p, 0));
                let col = a.addr(i0, p);
                for (v, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(_mm512_loadu_ps(col.add(v * 16)), xp, *acc);
                }
            }
            for (v, &acc) in acc.iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add(v * 16), acc);
            }
            finish(&out, i0, V * 16, alpha, beta, y);
            i0 += V * 16;
        }
        // The last < 128 rows, one (masked) vector at a time, four columns per step so four
        // chains hide the FMA latency.
        while i0 < m {
            let rows = 16.min(m - i0);
            let mask = ((1u32 << rows) - 1) as u16;
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut p = 0;
            while p + 4 <= k {
                for (u, acc) in acc.iter_mut().enumerate() {
                    let xp = _mm512_set1_ps(x.at(p + u, 0));
                    *acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a.addr(i0, p + u)), xp, *acc);
                }
                p += 4;
            }
            while p < k {
                let xp = _mm512_set1_ps(x.at(p, 0));
                acc[0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a.addr(i0, p)), xp, acc[0]);
                p += 1;
            }
            let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            _mm512_storeu_ps(out.as_mut_ptr(), s);
            finish(&out, i0, rows, alpha, beta, y);
            i0 += rows;
        }
    }

    /// y[i0 + r] = alpha * out[r] + beta * y[i0 + r] for r < rows.
    #[inline(always)]
    unsafe fn finish(out: &[f32], i0: usize, rows: usize, alpha: f32, beta: f32, y: MatMut) {
        for (r, &s) in out[..rows].iter().enumerate() {
            super::store_y(y, i0 + r, alpha * s, beta);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Thread pool
// ---------------------------------------------------------------------------------------------

/// A few persistent workers, so a product pays a hand-over (well under a microsecond while
/// the workers are still polling after the previous product, a futex wake-up otherwise) rather
/// than a thread spawn, and each worker keeps its packing buffers warm.
///
/// Work comes as numbered chunks that any thread may claim, the caller included. The caller
/// waits only for chunks a worker actually claimed, never for a worker to wake up: a worker
/// that arrives late (a sleeping vCPU can take tens of microseconds) finds nothing left and
/// leaves, so a parallel product is never much slower than a serial one.
mod pool {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::mpsc::{self, Receiver, TryRecvError};
    use std::sync::{Arc, Condvar, Mutex, OnceLock};
    use std::time::{Duration, Instant};

    /// How long an idle worker keeps polling for the next job before it sleeps: the operations
    /// of a training step (products, and the elementwise loops split over the pool) then skip
    /// the wake-up, and small ones are split only while a worker polls. 300 µs let the worker
    /// doze off between a Transformer step's larger operations; 5 ms keeps it at hand for the
    /// whole step (W6 steps ~10% faster at two threads, four alternating rounds on a noisy
    /// VM), at the cost of an otherwise idle
    /// CPU polling for 5 ms after the last operation. Polling yields the CPU, because the
    /// scheduler may have put the worker on the caller's own CPU.
    const WORKER_POLL: Duration = Duration::from_micros(5000);
    /// How long the caller polls for claimed chunks to finish before it sleeps.
    const CALLER_POLL: Duration = Duration::from_micros(2000);

    /// Chunks `0..chunks` of one product.
    ///
    /// `work` captures raw pointers into the caller's operands; they are valid only until the
    /// caller's `run` returns. That is sound because `work` is called only for a claimed chunk
    /// (`next` < `chunks`), and `run` returns only after its own claim has failed and `active`
    /// has been seen at zero. All of these are SeqCst: a helper raises `active` before it
    /// claims, so either the caller sees it and waits for it to finish, or its claim comes
    /// after the caller's failed one and fails as well (`next` only grows).
    struct Claims {
        work: Box<dyn Fn(usize) + Send + Sync>,
        chunks: usize,
        next: AtomicUsize,
        /// Helpers (not the caller) between raising and lowering it in `help`.
        active: AtomicUsize,
        lock: Mutex<()>,
        idle: Condvar,
        panicked: AtomicBool,
    }

    impl Claims {
        fn claim_all(&self) {
            loop {
                let i = self.next.fetch_add(1, SeqCst);
                if i >= self.chunks {
                    return;
                }
                // Caught so that a panic cannot skip the bookkeeping that `run`'s soundness
                // rests on; `run` re-raises it once nothing runs any more.
                if catch_unwind(AssertUnwindSafe(|| (self.work)(i))).is_err() {
                    self.panicked.store(true, SeqCst);
                }
            }
        }

        fn help(&self) {
            self.active.fetch_add(1, SeqCst);
            self.claim_all();
            if self.active.fetch_sub(1, SeqCst) == 1 {
                // Taking the lock orders this notify after a sleeper's last look at `active`.
                let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.idle.notify_all();
            }
        }

        fn wait_idle(&self) {
            let start = Instant::now();
            while self.active.load(SeqCst) > 0 {
                if start.elapsed() > CALLER_POLL {
                    let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                    while self.active.load(SeqCst) > 0 {
                        g = self.idle.wait(g).unwrap_or_else(|e| e.into_inner());
                    }
                    return;
                }
                std::thread::yield_now();
            }
        }
    }

    struct Worker {
        tx: mpsc::Sender<Arc<Claims>>,
        /// Blocked in `recv`: a send must wake it through the kernel.
        asleep: Arc<AtomicBool>,
    }

    static WORKERS: OnceLock<Mutex<Vec<Worker>>> = OnceLock::new();

    fn workers() -> std::sync::MutexGuard<'static, Vec<Worker>> {
        WORKERS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many of the first `max` workers are awake (a hint: one may doze off right after).
    pub(super) fn awake(max: usize) -> usize {
        workers().iter().take(max).filter(|w| !w.asleep.load(SeqCst)).count()
    }

    /// The next job: polled for a while, then waited for. None when the pool is gone.
    fn next_job(rx: &Receiver<Arc<Claims>>, asleep: &AtomicBool) -> Option<Arc<Claims>> {
        let start = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(job) => return Some(job),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if start.elapsed() > WORKER_POLL => {
                    asleep.store(true, SeqCst);
                    let job = rx.recv().ok();
                    asleep.store(false, SeqCst);
                    return job;
                }
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
    }

    fn spawn_worker() -> Option<Worker> {
        let (tx, rx) = mpsc::channel::<Arc<Claims>>();
        let asleep = Arc::new(AtomicBool::new(false));
        let flag = asleep.clone();
        let worker = move || {
            crate::cpu::subnormals::apply_to_this_thread();
            while let Some(job) = next_job(&rx, &flag) {
                job.help();
            }
        };
        std::thread::Builder::new().name("dp-gemm".into()).spawn(worker).ok().map(|_| Worker { tx, asleep })
    }

    /// Runs `work(0..chunks)` on this thread and up to `helpers` workers (only those awake
    /// unless `wake`); returns when all chunks are done. Several callers may share the workers:
    /// a busy worker just claims less.
    pub(super) fn run(chunks: usize, helpers: usize, wake: bool, work: Box<dyn Fn(usize) + Send + Sync>) {
        let claims = Arc::new(Claims {
            work,
            chunks,
            next: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            lock: Mutex::new(()),
            idle: Condvar::new(),
            panicked: AtomicBool::new(false),
        });
        {
            let mut workers = workers();
            while wake && workers.len() < helpers {
                match spawn_worker() {
                    Some(w) => workers.push(w),
                    None => break,
                }
            }
            for w in workers.iter().take(helpers).filter(|w| wake || !w.asleep.load(SeqCst)) {
                // A worker that is gone just helps no more; the caller claims its share.
                let _ = w.tx.send(claims.clone());
            }
        }
        claims.claim_all();
        claims.wait_idle();
        if claims.panicked.load(SeqCst) {
            panic!("gemm: a chunk of the product panicked");
        }
    }
}

/// Tests may split even tiny products over the pool, to cover every path's threading.
#[cfg(not(test))]
fn force_parallel() -> bool {
    false
}

#[cfg(test)]
fn force_parallel() -> bool {
    tests::FORCE_PARALLEL.with(std::cell::Cell::get)
}

/// `f` with every split of this thread's work through the pool, however small.
#[cfg(test)]
pub(crate) fn with_forced_parallel<R>(f: impl FnOnce() -> R) -> R {
    tests::FORCE_PARALLEL.with(|c| c.set(true));
    let r = f();
    tests::FORCE_PARALLEL.with(|c| c.set(false));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array1, Array2, ShapeBuilder};
    use std::cell::Cell;

    thread_local! {
        pub(super) static FORCE_PARALLEL: Cell<bool> = const { Cell::new(false) };
    }

    /// A tiny deterministic generator: values in [-1, 1).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Layout {
        Row,
        Col,
        /// Every other row and column of a bigger array: no unit stride at all.
        Strided,
        /// Row-major with padded rows (leading dimension > columns).
        Padded,
        /// Row-major with the first axis reversed (negative stride).
        Neg,
    }

    const LAYOUTS: [Layout; 5] = [Layout::Row, Layout::Col, Layout::Strided, Layout::Padded, Layout::Neg];

    /// An owned array with the given memory layout (owned arrays may have any strides).
    fn make(rows: usize, cols: usize, layout: Layout, rng: &mut Lcg) -> Array2<f32> {
        let mut a = match layout {
            Layout::Row | Layout::Neg => Array2::zeros((rows, cols)),
            Layout::Col => Array2::zeros((rows, cols).f()),
            Layout::Strided => {
                let mut a = Array2::zeros((2 * rows, 2 * cols));
                a.slice_collapse(s![..;2, ..;2]);
                a
            }
            Layout::Padded => {
                let mut a = Array2::zeros((rows, cols + 3));
                a.slice_collapse(s![.., ..cols]);
                a
            }
        };
        if let Layout::Neg = layout {
            a.invert_axis(Axis(0));
        }
        a.map_inplace(|v| *v = rng.next());
        a
    }

    fn isas() -> Vec<Isa> {
        [Isa::Portable, Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| i <= Isa::best()).collect()
    }

    /// |got - want| <= tol * (|alpha| Σ|a||b| + |beta c|): f32 rounding grows with k.
    fn check_gemm(
        alpha: f32,
        a: &Array2<f32>,
        b: &Array2<f32>,
        beta: f32,
        c0: &Array2<f32>,
        got: &Array2<f32>,
        what: &str,
    ) {
        let (m, k) = a.dim();
        let n = b.dim().1;
        let tol = 1e-6 * (k as f64 + 2.0);
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let t = a[[i, p]] as f64 * b[[p, j]] as f64;
                    s += t;
                    mag += t.abs();
                }
                let old = if beta == 0.0 { 0.0 } else { beta as f64 * c0[[i, j]] as f64 };
                let want = alpha as f64 * s + old;
                let mag = (alpha as f64).abs() * mag + old.abs() + 1e-30;
                let g = got[[i, j]] as f64;
                assert!(
                    (g - want).abs() <= tol * mag,
                    "{what}: ({i}, {j}) got {g}, want {want} (m={m} n={n} k={k} alpha={alpha} beta={beta})"
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_gemm(
        isa: Isa,
        threads: usize,
        (m, n, k): (usize, usize, usize),
        (la, lb, lc): (Layout, Layout, Layout),
        alpha: f32,
        beta: f32,
        nan_c: bool,
        rng: &mut Lcg,
    ) {
        let a = make(m, k, la, rng);
        let b = make(k, n, lb, rng);
        let mut c = make(m, n, lc, rng);
        if nan_c {
            c.fill(f32::NAN);
        }
        let c0 = c.clone();
        gemm_with(isa, threads, alpha, a.view(), b.view(), beta, c.view_mut());
        let what = format!("{isa:?} threads={threads} layouts=({la:?}, {lb:?}, {lc:?})");
        check_gemm(alpha, &a, &b, beta, &c0, &c, &what);
    }

    #[test]
    fn gemm_small_and_odd_sizes_all_layouts() {
        let sizes = [1, 2, 3, 7, 15, 16, 17, 31, 33];
        let mut rng = Lcg(1);
        let mut combo = 0usize;
        for isa in isas() {
            for &m in &sizes {
                for &n in &sizes {
                    for &k in &sizes {
                        // Rotate through the layout triples rather than taking their product.
                        combo += 1;
                        let la = LAYOUTS[combo % 5];
                        let lb = LAYOUTS[(combo / 5) % 5];
                        let lc = LAYOUTS[(combo / 25) % 5];
                        run_gemm(isa, 1, (m, n, k), (la, lb, lc), 1.0, 0.0, false, &mut rng);
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_every_layout_pair_medium() {
        let mut rng = Lcg(2);
        for isa in isas() {
            for la in LAYOUTS {
                for lb in LAYOUTS {
                    for lc in [Layout::Row, Layout::Col, Layout::Strided] {
                        run_gemm(isa, 1, (65, 100, 129), (la, lb, lc), 0.75, -1.5, false, &mut rng);
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_larger_sizes_and_k_blocks() {
        let mut rng = Lcg(3);
        let shapes = [(100, 129, 300), (300, 65, 100), (129, 300, 600), (33, 17, 1000), (13, 4200, 5)];
        for isa in isas() {
            for (i, &shape) in shapes.iter().enumerate() {
                let la = LAYOUTS[i % 5];
                let lb = LAYOUTS[(i + 2) % 5];
                run_gemm(isa, 1, shape, (la, lb, Layout::Row), 1.0, 1.0, false, &mut rng);
            }
        }
    }

    #[test]
    fn gemm_alpha_beta_and_nan() {
        let mut rng = Lcg(4);
        let shapes = [(1, 1, 1), (5, 1, 7), (1, 9, 4), (7, 9, 1), (20, 40, 1), (17, 33, 31), (40, 70, 2)];
        for isa in isas() {
            for &shape in &shapes {
                for (alpha, beta) in [(1.0, 0.0), (1.0, 1.0), (-0.5, 2.0), (0.0, 0.5), (2.0, -1.0), (0.0, 0.0)] {
                    for lc in [Layout::Row, Layout::Col, Layout::Strided] {
                        run_gemm(isa, 1, shape, (Layout::Row, Layout::Col, lc), alpha, beta, false, &mut rng);
                    }
                }
                // beta = 0 must not read C, even NaN.
                for lc in [Layout::Row, Layout::Col, Layout::Strided, Layout::Neg] {
                    run_gemm(isa, 1, shape, (Layout::Col, Layout::Row, lc), 1.5, 0.0, true, &mut rng);
                    run_gemm(isa, 1, shape, (Layout::Row, Layout::Row, lc), 0.0, 0.0, true, &mut rng);
                }
            }
        }
    }

    #[test]
    fn gemm_k_zero_and_empty() {
        let mut rng = Lcg(5);
        for isa in isas() {
            for (m, n, k) in [(0, 0, 0), (0, 5, 3), (4, 0, 3), (4, 5, 0), (0, 0, 7), (3, 3, 0), (1, 1, 0)] {
                for beta in [0.0, 1.0, 3.0] {
                    run_gemm(isa, 2, (m, n, k), (Layout::Row, Layout::Col, Layout::Row), 1.0, beta, false, &mut rng);
                }
                run_gemm(isa, 2, (m, n, k), (Layout::Row, Layout::Row, Layout::Row), 1.0, 0.0, true, &mut rng);
            }
        }
    }

    #[test]
    fn gemm_threaded() {
        let mut rng = Lcg(6);
        // Large enough for the pool; shapes that split n, split m, and leave uneven parts.
        let shapes = [(300, 257, 290), (513, 130, 200), (130, 515, 200), (97, 1000, 70)];
        for isa in isas() {
            for (i, &shape) in shapes.iter().enumerate() {
                for threads in [2, 3] {
                    let la = LAYOUTS[i % 5];
                    let lb = LAYOUTS[(i + threads) % 5];
                    run_gemm(isa, threads, shape, (la, lb, Layout::Row), 1.0, 0.5, false, &mut rng);
                }
            }
        }
    }

    #[test]
    fn gemm_forced_parallel_all_paths() {
        // Every size through the pool: the unpacked small path, thin (flipped) products, edges.
        FORCE_PARALLEL.with(|f| f.set(true));
        let mut rng = Lcg(11);
        let shapes = [
            (2, 2, 2),
            (3, 40, 5),
            (2, 100, 7),
            (40, 3, 5),
            (17, 33, 9),
            (65, 100, 31),
            (128, 10, 256),
            (100, 129, 64),
        ];
        for isa in isas() {
            for (i, &shape) in shapes.iter().enumerate() {
                for threads in [2, 3] {
                    let la = LAYOUTS[i % 5];
                    let lb = LAYOUTS[(i + threads) % 5];
                    let lc = [Layout::Row, Layout::Strided, Layout::Col][i % 3];
                    run_gemm(isa, threads, shape, (la, lb, lc), 1.0, 0.5, false, &mut rng);
                    run_gemm(isa, threads, shape, (Layout::Row, Layout::Row, Layout::Row), -1.0, 0.0, true, &mut rng);
                    // beta != 0 catches a chunk computed twice.
                    run_gemm(isa, threads, shape, (Layout::Col, Layout::Row, Layout::Row), 1.0, 2.0, false, &mut rng);
                    run_gemm(
                        isa,
                        threads,
                        shape,
                        (Layout::Row, Layout::Row, Layout::Padded),
                        1.0,
                        2.0,
                        false,
                        &mut rng,
                    );
                }
            }
        }
        FORCE_PARALLEL.with(|f| f.set(false));
    }

    #[test]
    fn gemm_from_many_threads_at_once() {
        // Callers that find the pool busy run alone; all results must still be right.
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    let mut rng = Lcg(100 + t);
                    for _ in 0..3 {
                        run_gemm(
                            Isa::detect(),
                            2,
                            (200, 210, 150),
                            (Layout::Row, Layout::Col, Layout::Row),
                            1.0,
                            0.0,
                            true,
                            &mut rng,
                        );
                    }
                });
            }
        });
    }

    #[test]
    fn gemm_broadcast_operands() {
        // Zero strides (a broadcast row of A, a broadcast column of B).
        let mut rng = Lcg(7);
        let row = Array1::from_shape_fn(37, |_| rng.next());
        let col = Array2::from_shape_fn((37, 1), |_| rng.next());
        let a = row.broadcast((20, 37)).unwrap();
        let b = col.broadcast((37, 45)).unwrap();
        for isa in isas() {
            let mut c = Array2::from_elem((20, 45), f32::NAN);
            gemm_with(isa, 1, 1.0, a, b, 0.0, c.view_mut());
            check_gemm(1.0, &a.to_owned(), &b.to_owned(), 0.0, &c.clone(), &c, "broadcast");
        }
    }

    #[test]
    fn public_entry_points() {
        let mut rng = Lcg(8);
        let a = make(70, 50, Layout::Row, &mut rng);
        let b = make(50, 40, Layout::Col, &mut rng);
        let mut c = Array2::from_elem((70, 40), f32::NAN);
        gemm(1.0, a.view(), b.view(), 0.0, c.view_mut());
        check_gemm(1.0, &a, &b, 0.0, &c.clone(), &c, "gemm");
        let x = Array1::from_shape_fn(50, |_| rng.next());
        let mut y = Array1::from_elem(70, f32::NAN);
        gemv(1.0, a.view(), x.view(), 0.0, y.view_mut());
        let want = a.dot(&x);
        for i in 0..70 {
            assert!((y[i] - want[i]).abs() <= 1e-4, "gemv {i}");
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_gemv(
        isa: Isa,
        (m, k): (usize, usize),
        la: Layout,
        xs: isize,
        ys: isize,
        alpha: f32,
        beta: f32,
        rng: &mut Lcg,
    ) {
        let a = make(m, k, la, rng);
        // Strided vectors: a slice of a longer one with step xs (negative: reversed).
        let xbig = Array1::from_shape_fn(k * xs.unsigned_abs(), |_| rng.next());
        let x = xbig.slice(s![..;xs]);
        let mut ybig =
            Array1::from_shape_fn(m * ys.unsigned_abs(), |_| if beta == 0.0 { f32::NAN } else { rng.next() });
        let y0 = ybig.slice(s![..;ys]).to_owned();
        gemv_with(isa, alpha, a.view(), x, beta, ybig.slice_mut(s![..;ys]));
        let y = ybig.slice(s![..;ys]);
        let tol = 1e-6 * (k as f64 + 2.0);
        for i in 0..m {
            let (mut sum, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                let t = a[[i, p]] as f64 * x[p] as f64;
                sum += t;
                mag += t.abs();
            }
            let old = if beta == 0.0 { 0.0 } else { beta as f64 * y0[i] as f64 };
            let want = alpha as f64 * sum + old;
            let mag = (alpha as f64).abs() * mag + old.abs() + 1e-30;
            assert!(
                (y[i] as f64 - want).abs() <= tol * mag,
                "gemv {isa:?} {la:?} m={m} k={k} xs={xs} ys={ys} alpha={alpha} beta={beta}: y[{i}] = {}, want {want}",
                y[i]
            );
        }
    }

    #[test]
    fn gemv_shapes_layouts_strides() {
        let mut rng = Lcg(9);
        let shapes = [
            (0, 0),
            (0, 3),
            (3, 0),
            (1, 1),
            (1, 17),
            (17, 1),
            (7, 15),
            (8, 16),
            (9, 33),
            (65, 100),
            (100, 100),
            (129, 31),
            (300, 750),
            (750, 300),
        ];
        for isa in isas() {
            for &shape in &shapes {
                for la in LAYOUTS {
                    for (xs, ys) in [(1, 1), (2, 1), (1, 3), (-1, -2)] {
                        for (alpha, beta) in [(1.0, 0.0), (-2.0, 0.5), (0.0, 1.0)] {
                            run_gemv(isa, shape, la, xs, ys, alpha, beta, &mut rng);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_vector_shaped_products() {
        // n = 1, m = 1 and k = 1 take the gemv and rank-1 routes.
        let mut rng = Lcg(10);
        let shapes = [(750, 1, 300), (1, 750, 300), (300, 750, 1), (100, 1, 100), (1, 1, 50), (65, 100, 1), (1, 33, 1)];
        for isa in isas() {
            for &shape in &shapes {
                for (la, lb, lc) in [
                    (Layout::Row, Layout::Row, Layout::Row),
                    (Layout::Col, Layout::Col, Layout::Col),
                    (Layout::Strided, Layout::Neg, Layout::Strided),
                    (Layout::Padded, Layout::Col, Layout::Neg),
                ] {
                    run_gemm(isa, 1, shape, (la, lb, lc), 1.0, 0.0, true, &mut rng);
                    run_gemm(isa, 1, shape, (la, lb, lc), 0.5, 1.0, false, &mut rng);
                }
            }
        }
    }
}
