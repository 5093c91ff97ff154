//! Submissions off the interpreter's thread.
//!
//! Ending a compute pass, finishing its encoder and submitting it is where wgpu validates and
//! encodes each recorded dispatch: a staged W6 step (428 dispatches) spent about 2 of its 6 ms
//! submitting on an H200's host while the GPU sat idle (it was busy 2.3 ms of them;
//! `DP_GPU_STATS=1`, bench/RESULTS.md) — about 5 µs a dispatch on average, a quotient, not a
//! per-dispatch timing. One thread does that work, in the order the batches
//! were recorded, while the interpreter records the next ones. A read-back waits for the
//! thread to have submitted everything before it, then submits its own batch itself
//! (`submit_here`).
//!
//! Where the thread cannot be started, or has stopped, batches are submitted on the caller's
//! thread.
//!
//! Before the process exits, `shutdown` lets the thread submit what it was handed, joins it
//! and closes the queue to every thread (`Target::gate`): `exit` must not run the driver's
//! exit-time handlers (LLVM's, on lavapipe) while a thread is still inside `queue.submit`
//! (docs/gpu.md).

use super::stats::{Stats, Step};
use crate::TResult;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

/// Recorded commands ready to go: the compute pass still open on the encoder, if any.
pub struct Batch {
    pub pass: Option<wgpu::ComputePass<'static>>,
    pub encoder: wgpu::CommandEncoder,
}

enum Job {
    /// Boxed: a pass and an encoder are hundreds of bytes, a channel slot holds the largest job.
    Submit(Box<Batch>),
    /// Answered once every batch sent before it has been submitted.
    Sync(SyncSender<()>),
}

/// The submission thread's end of the GPU.
#[derive(Clone)]
struct Target {
    device: wgpu::Device,
    queue: wgpu::Queue,
    stats: Option<Arc<Mutex<Stats>>>,
    /// Held by every submission, on any thread; true once the GPU has been shut down, when
    /// batches are dropped instead of submitted.
    gate: Arc<Mutex<bool>>,
}

/// The submission thread: its handle, and a channel that disconnects when it has ended.
struct Worker {
    handle: JoinHandle<()>,
    ended: Receiver<()>,
}

pub struct Submitter {
    /// The thread's job queue; `None` when there is no thread (it could not be started, or
    /// the GPU has been shut down).
    jobs: Mutex<Option<Sender<Job>>>,
    worker: Mutex<Option<Worker>>,
    target: Target,
    /// Batches handed to the thread, and those it has submitted: when they are equal there
    /// is nothing to wait for, and a read-back submits its last batch itself rather than pay
    /// two thread wake-ups.
    sent: AtomicU64,
    done: Arc<AtomicU64>,
}

/// The guard of `m`, poisoned or not (what the mutexes here guard stays consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Submitter {
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, stats: Option<Arc<Mutex<Stats>>>) -> Submitter {
        let target = Target { device: device.clone(), queue: queue.clone(), stats, gate: Arc::new(Mutex::new(false)) };
        let (tx, rx) = channel::<Job>();
        let (alive, ended) = channel::<()>();
        let worker = target.clone();
        let done = Arc::new(AtomicU64::new(0));
        let submitted = done.clone();
        let spawned = std::thread::Builder::new().name("dp-gpu-submit".into()).spawn(move || {
            // Dropped when the thread ends, panicking or not: `shutdown` waits for that.
            let _alive = alive;
            for job in rx {
                match job {
                    Job::Submit(batch) => {
                        worker.submit(*batch);
                        submitted.fetch_add(1, Ordering::Release);
                    }
                    Job::Sync(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        let (jobs, worker) = match spawned {
            Ok(handle) => (Some(tx), Some(Worker { handle, ended })),
            Err(_) => (None, None),
        };
        Submitter { jobs: Mutex::new(jobs), worker: Mutex::new(worker), target, sent: AtomicU64::new(0), done }
    }

    /// Hands `batch` to the submission thread (or submits it here when there is none).
    pub fn submit(&self, batch: Batch) {
        let job = Job::Submit(Box::new(batch));
        let unsent = match &*lock(&self.jobs) {
            Some(tx) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                let unsent = tx.send(job).err().map(|e| e.0);
                if unsent.is_some() {
                    // The thread has gone: this batch is submitted here, below.
                    self.done.fetch_add(1, Ordering::Release);
                }
                unsent
            }
            None => Some(job),
        };
        if let Some(Job::Submit(batch)) = unsent {
            self.target.submit(*batch);
        }
    }

    /// Submits `batch` on this thread once every batch handed over before it has been
    /// submitted (for a read-back, which waits for the GPU next anyway).
    pub fn submit_here(&self, batch: Option<Batch>) -> TResult<()> {
        self.wait()?;
        if let Some(batch) = batch {
            if !self.target.submit(batch) {
                return Err("the GPU has been shut down (the process is ending)".to_string().into());
            }
        }
        Ok(())
    }

    /// Returns once every batch handed over so far has been submitted.
    fn wait(&self) -> TResult<()> {
        if self.done.load(Ordering::Acquire) == self.sent.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (done, answer) = sync_channel(1);
        let sent = lock(&self.jobs).as_ref().is_some_and(|tx| tx.send(Job::Sync(done)).is_ok());
        if sent && answer.recv().is_ok() {
            Ok(())
        } else {
            Err("the GPU's submission thread stopped; GPU results may be missing".to_string().into())
        }
    }

    /// Ends submission before the process exits: the thread submits every batch it was
    /// handed and is joined, then the queue is closed, so no thread (the thread's or another)
    /// is inside `queue.submit` afterwards and none enters it again (later batches are
    /// dropped, and a read-back is an error). Gives up at `deadline` (a thread stuck in the
    /// driver is left where it is); returns whether it got that far. Idempotent.
    pub fn shutdown(&self, deadline: Instant) -> bool {
        // Dropping the only sender ends the thread's loop once the queue is empty.
        drop(lock(&self.jobs).take());
        let worker = lock(&self.worker).take();
        if let Some(Worker { handle, ended }) = worker {
            match ended.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = handle.join();
                }
                // Never sent; a timeout: the thread is still submitting.
                Ok(()) | Err(RecvTimeoutError::Timeout) => return false,
            }
        }
        // Another thread may be submitting a read-back's batch: wait for it, up to `deadline`.
        loop {
            match self.target.gate.try_lock() {
                Ok(mut closed) => {
                    *closed = true;
                    return true;
                }
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    *p.into_inner() = true;
                    return true;
                }
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => return false,
            }
        }
    }
}

impl Target {
    /// Submits `batch`; false (the batch dropped) once the GPU has been shut down.
    fn submit(&self, batch: Batch) -> bool {
        let closed = lock(&self.gate);
        if *closed {
            return false;
        }
        let start = self.stats.as_ref().map(|_| Instant::now());
        drop(batch.pass);
        self.queue.submit([batch.encoder.finish()]);
        self.timed(Step::Submit, start);
        // Let wgpu retire finished work and free what it no longer needs (non-blocking).
        let start = self.stats.as_ref().map(|_| Instant::now());
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.timed(Step::Poll, start);
        drop(closed);
        true
    }

    fn timed(&self, step: Step, start: Option<Instant>) {
        if let (Some(stats), Some(t)) = (&self.stats, start) {
            if let Ok(mut s) = stats.lock() {
                s.add(step, t);
            }
        }
    }
}
