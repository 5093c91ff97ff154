//! How the `dp` process gets memory: the C allocator told to keep freed memory, the largest
//! blocks kept by dp itself for the next request of the same size, and the smallest blocks
//! that AD makes by the hundred thousand kept per thread (`CELL`).
//!
//! A training loop frees and allocates the same buffers step after step. A buffer that comes
//! back from the system is new pages, and the kernel faults each page in (and zeroes it) on
//! first touch: for a 100 MB tensor that is 25 000 faults, several times the cost of the
//! arithmetic that fills it (`bench/vmap`, whose per-example gradients are one 100 MB tensor
//! per batch, spent about three quarters of its samples in the kernel, faulting pages in and
//! unmapping freed blocks). Buffers below
//! [`LARGE`] stay in glibc's heap once [`keep_freed_memory`] has run; above it glibc maps and
//! unmaps every block (its mmap threshold cannot be raised further, and the evaluator's
//! thread allocates from an arena whose heaps are at most 64 MB), so [`Reusing`] keeps those
//! blocks itself.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;

/// Blocks of at least this many bytes are the ones glibc maps afresh for every request:
/// its largest mmap threshold, which [`keep_freed_memory`] sets.
pub const LARGE: usize = 32 << 20;

/// Has the C allocator keep freed memory for reuse instead of returning it to the system.
/// A training step frees and reallocates the same activation-sized buffers (hundreds of
/// kilobytes) hundreds of times; glibc's defaults serve such sizes by `mmap` and trim freed
/// heap tops, so every new buffer was faulted in again page by page (W6, 21 steps: 68 000 to
/// 190 000 page faults and 0.17–0.43 s of system time before, 15 000 and 0.05 s after). A
/// process's resident memory then stays at its high-water mark, which is the peak RSS the
/// benchmarks report anyway.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: i32, value: i32) -> i32;
        }
        const M_TRIM_THRESHOLD: i32 = -1;
        const M_MMAP_THRESHOLD: i32 = -3;
        // SAFETY: mallopt only sets allocator parameters; it is called before any other
        // thread exists. Larger blocks than the threshold are mapped (and kept by `Reusing`).
        unsafe {
            mallopt(M_MMAP_THRESHOLD, LARGE as i32);
            mallopt(M_TRIM_THRESHOLD, i32::MAX);
        }
    }
}

/// The length past which [`push_long`] grows a full vector straight to a mapped block.
pub const LONG: usize = 1 << 16;

/// Pushes onto a vector that may grow to millions of elements (a trace's nodes, a `grad`
/// level's adjoint records). Doubling below the allocator's mmap threshold ([`LARGE`])
/// copies the vector into fresh blocks each time (on W1's first call 17% of the page faults
/// were in those copies). Past [`LONG`] elements a full vector instead grows to at least
/// `LARGE` bytes at once: the block is mapped, only its written pages become resident, and
/// later doublings remap it (`mremap`) without copying.
#[inline]
pub fn push_long<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        reserve_long(v);
    }
    v.push(x);
}

/// Makes room for at least one more element in `v` the way [`push_long`] does: doubling while
/// short, straight to a mapped block once long.
#[cold]
pub fn reserve_long<T>(v: &mut Vec<T>) {
    if v.len() >= LONG {
        let room = LARGE.div_ceil(std::mem::size_of::<T>().max(1)).max(2 * v.len());
        v.reserve_exact(room - v.len());
    } else {
        v.reserve(1);
    }
}

/// The size of the small blocks [`Reusing`] keeps per thread: a tracked value's `Rc` cell
/// (`Tracked` and its counts, 64 bytes: a test in runtime/value.rs holds it there), made and
/// freed once per differentiated operation. A `grad` of a scalar loop makes hundreds of
/// thousands, frees them all in its backward pass, and makes them again on the next call:
/// more than glibc's per-thread cache holds, so each went through its slower bins (on W1,
/// unstaged, a call took 74 ms with them and 67.5 ms with this list).
const CELL: usize = 64;

/// How many freed cells a thread keeps (64 MB); further ones go back to the C allocator, so a
/// program that stops differentiating does not hold more than this for cells it no longer makes.
const MAX_CELLS: usize = 1 << 20;

/// A thread's freed [`CELL`]-byte blocks, each linked to the next through its first word,
/// and how many there are.
struct Cells {
    head: Cell<*mut u8>,
    len: Cell<usize>,
}

thread_local! {
    static CELLS: Cells = const { Cells { head: Cell::new(std::ptr::null_mut()), len: Cell::new(0) } };
}

/// Whether a block of this layout goes to the per-thread list: any `CELL`-byte block the C
/// allocator's own alignment (16) covers, so every listed block serves every such request.
#[inline]
fn is_cell(layout: Layout) -> bool {
    layout.size() == CELL && layout.align() <= 16
}

/// How many freed large blocks are kept, and how many bytes they may hold in all.
const SLOTS: usize = 4;
const MAX_KEPT: usize = 512 << 20;

/// The system allocator, except that a freed block of [`LARGE`] bytes or more is kept (up to
/// [`SLOTS`] blocks, [`MAX_KEPT`] bytes) and handed out again for the next request of exactly
/// its size and alignment: its pages are already resident.
///
/// Kept blocks cost resident memory, so a request for a large size that no kept block has
/// first returns every kept block to the system: a program whose large buffers change size
/// does not hold stale ones, and kept blocks add to the resident memory only between a large
/// block's release and the next large request (at most [`MAX_KEPT`] bytes). Small blocks go
/// straight to the system allocator.
pub struct Reusing {
    kept: Mutex<[Kept; SLOTS]>,
}

#[derive(Clone, Copy)]
struct Kept {
    ptr: *mut u8,
    size: usize,
    align: usize,
}

const EMPTY: Kept = Kept { ptr: std::ptr::null_mut(), size: 0, align: 0 };

// SAFETY: the kept pointers are blocks nobody else refers to; the mutex serialises access.
unsafe impl Send for Kept {}

impl Reusing {
    pub const fn new() -> Reusing {
        Reusing { kept: Mutex::new([EMPTY; SLOTS]) }
    }

    /// A kept block of this layout, or `None` after returning all kept blocks to the system.
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        let mut stale = [EMPTY; SLOTS];
        {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(k) =
                kept.iter_mut().find(|k| !k.ptr.is_null() && k.size == layout.size() && k.align == layout.align())
            {
                return Some(std::mem::replace(k, EMPTY).ptr);
            }
            std::mem::swap(&mut *kept, &mut stale);
        }
        for k in stale.iter().filter(|k| !k.ptr.is_null()) {
            // SAFETY: each kept block was allocated by `System` with this layout.
            unsafe { System.dealloc(k.ptr, Layout::from_size_align_unchecked(k.size, k.align)) };
        }
        None
    }

    /// Keeps a freed block if there is room, else returns it to the system.
    fn keep(&self, ptr: *mut u8, layout: Layout) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = kept.iter().map(|k| k.size).sum();
        if held + layout.size() <= MAX_KEPT {
            if let Some(slot) = kept.iter_mut().find(|k| k.ptr.is_null()) {
                *slot = Kept { ptr, size: layout.size(), align: layout.align() };
                return;
            }
        }
        drop(kept);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

impl Default for Reusing {
    fn default() -> Self {
        Reusing::new()
    }
}

// SAFETY: every block handed out is one `System` allocated with the same size and alignment
// (kept blocks are matched exactly; a listed cell is a `CELL`-byte block, which the C
// allocator aligns to 16, so it serves any `CELL`-byte request `is_cell` takes), and every
// block is freed by `System` with its layout or kept for reuse.
unsafe impl GlobalAlloc for Reusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_cell(layout) {
            // SAFETY: a listed block is a freed `CELL`-byte block of the C allocator, its
            // first word the next one's address.
            let p = CELLS.with(|c| {
                let p = c.head.get();
                if !p.is_null() {
                    c.head.set(*(p as *mut *mut u8));
                    c.len.set(c.len.get() - 1);
                }
                p
            });
            if !p.is_null() {
                return p;
            }
        }
        if layout.size() >= LARGE {
            if let Some(p) = self.take(layout) {
                return p;
            }
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LARGE {
            if let Some(p) = self.take(layout) {
                std::ptr::write_bytes(p, 0, layout.size());
                return p;
            }
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_cell(layout) {
            // SAFETY: the block is freed, so its first word is free to link it.
            let kept = CELLS.with(|c| {
                let room = c.len.get() < MAX_CELLS;
                if room {
                    *(ptr as *mut *mut u8) = c.head.get();
                    c.head.set(ptr);
                    c.len.set(c.len.get() + 1);
                }
                room
            });
            if kept {
                return;
            }
        }
        if layout.size() >= LARGE {
            self.keep(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A growing vector keeps glibc's own resizing (mremap for mapped blocks, no copy).
        System.realloc(ptr, layout, new_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_large_block_serves_the_next_request_of_its_size_zeroed() {
        let a = Reusing::new();
        let layout = Layout::from_size_align(LARGE, 64).unwrap();
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(7, layout.size());
            a.dealloc(p, layout);
            let q = a.alloc_zeroed(layout);
            assert_eq!(p, q, "the kept block is handed out again");
            assert!(std::slice::from_raw_parts(q, layout.size()).iter().all(|&b| b == 0));
            a.dealloc(q, layout);
            // Another large size returns the kept block to the system first.
            let other = Layout::from_size_align(LARGE + 4096, 64).unwrap();
            let r = a.alloc(other);
            assert!(!r.is_null());
            assert!(a.kept.lock().unwrap().iter().all(|k| k.ptr.is_null()));
            a.dealloc(r, other);
            a.take(other);
        }
    }

    #[test]
    fn a_freed_cell_serves_the_next_request_of_its_size_on_its_thread() {
        let a = Reusing::new();
        let cell = Layout::from_size_align(CELL, 8).unwrap();
        unsafe {
            let (p, q) = (a.alloc(cell), a.alloc(cell));
            assert!(!p.is_null() && !q.is_null() && p != q);
            p.write_bytes(1, CELL);
            a.dealloc(p, cell);
            a.dealloc(q, cell);
            // Last freed, first reused; an alignment of 16 is served by the same blocks.
            let wide = Layout::from_size_align(CELL, 16).unwrap();
            assert_eq!(a.alloc(wide), q);
            let r = a.alloc(cell);
            assert_eq!(r, p);
            assert_eq!(r as usize % 16, 0);
            r.write_bytes(2, CELL);
            a.dealloc(r, cell);
            a.dealloc(q, wide);
            // Another size is not a cell.
            let other = Layout::from_size_align(CELL + 8, 8).unwrap();
            let s = a.alloc(other);
            assert!(s != p && s != q);
            a.dealloc(s, other);
        }
    }

    #[test]
    fn a_thread_keeps_at_most_max_cells() {
        let a = Reusing::new();
        let cell = Layout::from_size_align(CELL, 8).unwrap();
        let listed = || CELLS.with(|c| c.len.get());
        unsafe {
            let blocks: Vec<*mut u8> = (0..MAX_CELLS + 10).map(|_| a.alloc(cell)).collect();
            blocks.iter().for_each(|&p| a.dealloc(p, cell));
            assert_eq!(listed(), MAX_CELLS);
            (0..MAX_CELLS).for_each(|_| System.dealloc(a.alloc(cell), cell));
            assert_eq!(listed(), 0);
        }
    }

    #[test]
    fn a_long_vector_grows_to_a_mapped_block_at_once() {
        // 56 bytes: the size of an adjoint record, which does not divide `LARGE`.
        let mut v: Vec<[u64; 7]> = Vec::new();
        for i in 0..=LONG as u64 {
            push_long(&mut v, [i; 7]);
        }
        assert!(v.capacity() * std::mem::size_of::<[u64; 7]>() >= LARGE, "capacity {}", v.capacity());
        assert!(v.iter().enumerate().all(|(i, x)| x[0] == i as u64 && x[6] == i as u64));
    }

    #[test]
    fn kept_blocks_stay_within_the_bound() {
        let a = Reusing::new();
        let layout = Layout::from_size_align(MAX_KEPT / 2 + 1, 8).unwrap();
        unsafe {
            let (p, q) = (a.alloc(layout), a.alloc(layout));
            a.dealloc(p, layout);
            a.dealloc(q, layout);
            let held: usize = a.kept.lock().unwrap().iter().map(|k| k.size).sum();
            assert!(held <= MAX_KEPT);
            a.take(Layout::from_size_align(LARGE, 8).unwrap());
        }
    }
}
