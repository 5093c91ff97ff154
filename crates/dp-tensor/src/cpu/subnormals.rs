//! The process's choice about subnormal floats: IEEE 754 by default, or flushed to zero when
//! `DP_FLUSH_SUBNORMALS=1` — as XLA (JAX) does on every CPU thread it runs, and as PyTorch's
//! `torch.set_flush_denormal(True)` asks for.
//!
//! Why offer it: on many x86 cores an operation with a subnormal operand or result leaves the
//! fast path for a microcode assist. A loop whose adjoint decays
//! geometrically (W1's `acc * 0.99`, whose reverse pass multiplies by 0.99 100,000 times) sits
//! on the smallest subnormal for its last quarter — 0.99 × 5e-324 rounds back to 5e-324 — and
//! runs 3.3× as slowly as the same loop flushing it to zero (bench/w1/jit.sh, Intel Xeon). Why not by default: flushing
//! changes results (every value below 2.2e-308 in float64, 1.2e-38 in float32, becomes ±0,
//! on input and output), and dp's numbers are otherwise those of IEEE arithmetic everywhere.
//!
//! The mode is a per-thread control register (MXCSR's FTZ and DAZ bits on x86-64, FPCR's FZ
//! bit on AArch64), so it is set on every thread that computes: the interpreter's thread at
//! start-up and each worker of the CPU pool when it starts. Elsewhere the variable is ignored.

use std::sync::OnceLock;

/// Whether `DP_FLUSH_SUBNORMALS=1` (or `true`) asked for flushing; read once.
pub fn flush_requested() -> bool {
    static FLUSH: OnceLock<bool> = OnceLock::new();
    *FLUSH.get_or_init(|| std::env::var("DP_FLUSH_SUBNORMALS").is_ok_and(|v| matches!(v.trim(), "1" | "true")))
}

/// Puts this thread in the process's subnormal mode: flushes subnormals to zero if
/// `DP_FLUSH_SUBNORMALS` asked for it, and otherwise leaves the thread as it is (IEEE).
pub fn apply_to_this_thread() {
    if flush_requested() {
        set_flush(true);
    }
}

#[cfg(target_arch = "x86_64")]
const MXCSR_FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

/// Whether this thread flushes subnormals now.
#[cfg(target_arch = "x86_64")]
pub fn flushing() -> bool {
    let mut csr: u32 = 0;
    // SAFETY: stmxcsr writes the 4-byte control register to the local it is given.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags)) };
    csr & MXCSR_FTZ_DAZ == MXCSR_FTZ_DAZ
}

#[cfg(target_arch = "x86_64")]
fn set_flush(on: bool) {
    let mut csr: u32 = 0;
    // SAFETY: stmxcsr/ldmxcsr read and write this thread's SSE control register; only the
    // FTZ and DAZ bits change (rounding mode and exception masks are kept).
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags));
        csr = if on { csr | MXCSR_FTZ_DAZ } else { csr & !MXCSR_FTZ_DAZ };
        std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, preserves_flags));
    }
}

#[cfg(target_arch = "aarch64")]
const FPCR_FZ: u64 = 1 << 24;

/// Whether this thread flushes subnormals now.
#[cfg(target_arch = "aarch64")]
pub fn flushing() -> bool {
    let fpcr: u64;
    // SAFETY: reading FPCR has no side effects.
    unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags)) };
    fpcr & FPCR_FZ != 0
}

#[cfg(target_arch = "aarch64")]
fn set_flush(on: bool) {
    // SAFETY: only FPCR's FZ bit changes.
    unsafe {
        let mut fpcr: u64;
        std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags));
        fpcr = if on { fpcr | FPCR_FZ } else { fpcr & !FPCR_FZ };
        std::arch::asm!("msr fpcr, {}", in(reg) fpcr, options(nomem, nostack, preserves_flags));
    }
}

/// Whether this thread flushes subnormals now: never, without the mode.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn flushing() -> bool {
    false
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn set_flush(_on: bool) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushing_turns_subnormal_results_and_operands_into_zero_on_this_thread_only() {
        // A thread of its own, so the test runner's threads keep IEEE arithmetic.
        std::thread::spawn(|| {
            let tiny = std::hint::black_box(1e-308f64);
            assert!(!flushing());
            assert_eq!(tiny * 0.5, 5e-309);
            set_flush(true);
            if !flushing() {
                return; // an architecture without the mode
            }
            assert_eq!(std::hint::black_box(tiny) * 0.5, 0.0);
            let sub = std::hint::black_box(f64::from_bits(1)); // 5e-324 as an operand
            assert_eq!(sub * 2.0, 0.0);
            assert_eq!(std::hint::black_box(1e-38f32) * 0.5, 0.0);
            set_flush(false);
            assert_eq!(std::hint::black_box(tiny) * 0.5, 5e-309);
        })
        .join()
        .unwrap();
        assert_eq!(std::hint::black_box(1e-308f64) * 0.5, 5e-309);
    }
}
