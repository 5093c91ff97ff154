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

use super::stats::{Stats, Step};
use crate::TResult;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Sender, SyncSender};
use std::sync::{Arc, Mutex};
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
}

pub struct Submitter {
    jobs: Option<Mutex<Sender<Job>>>,
    target: Target,
    /// Batches handed to the thread, and those it has submitted: when they are equal there
    /// is nothing to wait for, and a read-back submits its last batch itself rather than pay
    /// two thread wake-ups.
    sent: AtomicU64,
    done: Arc<AtomicU64>,
}

impl Submitter {
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, stats: Option<Arc<Mutex<Stats>>>) -> Submitter {
        let target = Target { device: device.clone(), queue: queue.clone(), stats };
        let (tx, rx) = channel::<Job>();
        let worker = target.clone();
        let done = Arc::new(AtomicU64::new(0));
        let submitted = done.clone();
        let spawned = std::thread::Builder::new().name("dp-gpu-submit".into()).spawn(move || {
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
        Submitter { jobs: spawned.ok().map(|_| Mutex::new(tx)), target, sent: AtomicU64::new(0), done }
    }

    /// Hands `batch` to the submission thread (or submits it here when there is none).
    pub fn submit(&self, batch: Batch) {
        let Some(jobs) = &self.jobs else { return self.target.submit(batch) };
        let unsent = match jobs.lock() {
            Ok(tx) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                tx.send(Job::Submit(Box::new(batch))).err().map(|e| e.0)
            }
            Err(_) => Some(Job::Submit(Box::new(batch))),
        };
        if let Some(Job::Submit(batch)) = unsent {
            self.target.submit(*batch);
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    /// Submits `batch` on this thread once every batch handed over before it has been
    /// submitted (for a read-back, which waits for the GPU next anyway).
    pub fn submit_here(&self, batch: Option<Batch>) -> TResult<()> {
        self.wait()?;
        if let Some(batch) = batch {
            self.target.submit(batch);
        }
        Ok(())
    }

    /// Returns once every batch handed over so far has been submitted.
    fn wait(&self) -> TResult<()> {
        let Some(jobs) = &self.jobs else { return Ok(()) };
        if self.done.load(Ordering::Acquire) == self.sent.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (done, answer) = sync_channel(1);
        let sent = jobs.lock().map(|tx| tx.send(Job::Sync(done)).is_ok()).unwrap_or(false);
        if sent && answer.recv().is_ok() {
            Ok(())
        } else {
            Err("the GPU's submission thread stopped; GPU results may be missing".to_string().into())
        }
    }
}

impl Target {
    fn submit(&self, batch: Batch) {
        let start = self.stats.as_ref().map(|_| Instant::now());
        drop(batch.pass);
        self.queue.submit([batch.encoder.finish()]);
        self.timed(Step::Submit, start);
        // Let wgpu retire finished work and free what it no longer needs (non-blocking).
        let start = self.stats.as_ref().map(|_| Instant::now());
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.timed(Step::Poll, start);
    }

    fn timed(&self, step: Step, start: Option<Instant>) {
        if let (Some(stats), Some(t)) = (&self.stats, start) {
            if let Ok(mut s) = stats.lock() {
                s.add(step, t);
            }
        }
    }
}
