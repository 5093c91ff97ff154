//! `DP_GPU_STATS=1`: where a GPU program's time goes, said on stderr at every read-back.
//!
//! A GPU operation's cost has three possible homes: the CPU recording it (wgpu's validation,
//! the bind group, the driver's descriptor writes), the submission, and the GPU itself. Between
//! two read-backs this counts the dispatches and submissions, times each CPU-side step with a
//! clock, times the wait for the GPU at the read-back, and, where the adapter has timestamp
//! queries, the GPU's own times from timestamps written at the start and end of each compute
//! pass (a pass holds a run of consecutive dispatches, so nothing is written between them and
//! the dispatches run as they would untimed): busy, the sum of the passes' durations, and the
//! span from the first pass's start to the last one's end. Span minus busy is time the GPU
//! sat idle between passes, waiting for the CPU to submit more. One line per read-back then says which home holds the time:
//!
//! ```text
//! dp gpu stats: 51 dispatches, 1 submits, 0 new buffers, 0 new metas, 0 new bind groups | wall 1843 us; cpu: bind 52,
//!   record 31, submit 40, poll 0, wait 1650 | gpu: busy 1702 us, span 1790, longest pass 1702,
//!   1 timed passes
//! ```
//!
//! Off (one relaxed load per event) unless the variable is set when the GPU is created.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Timestamps kept between read-backs (two per pass); passes past it go untimed.
const QUERIES: u32 = 4096;

/// True when `DP_GPU_STATS=1`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("DP_GPU_STATS").is_ok_and(|v| v == "1"))
}

/// The features to ask the device for so the GPU can be timed.
pub fn features(adapter: wgpu::Features) -> wgpu::Features {
    let want = wgpu::Features::TIMESTAMP_QUERY;
    if enabled() && adapter.contains(want) {
        want
    } else {
        wgpu::Features::empty()
    }
}

/// What happened since the last read-back, and the timer that outlives each report.
pub struct Stats {
    counts: Counters,
    timer: Option<Timer>,
}

/// The counts and CPU times one report prints; a new one starts at every read-back.
struct Counters {
    since: Instant,
    dispatches: u64,
    submits: u64,
    new_buffers: u64,
    new_metas: u64,
    new_binds: u64,
    bind: Duration,
    record: Duration,
    submit: Duration,
    poll: Duration,
    wait: Duration,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            since: Instant::now(),
            dispatches: 0,
            submits: 0,
            new_buffers: 0,
            new_metas: 0,
            new_binds: 0,
            bind: Duration::ZERO,
            record: Duration::ZERO,
            submit: Duration::ZERO,
            poll: Duration::ZERO,
            wait: Duration::ZERO,
        }
    }
}

/// Timestamp queries written at each pass's start and end, resolved at the read-back.
struct Timer {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readable: wgpu::Buffer,
    used: u32,
    period_ns: f64,
}

/// The CPU-side steps timed with a clock.
#[derive(Clone, Copy)]
pub enum Step {
    Bind,
    Record,
    Submit,
    Poll,
    Wait,
}

impl Stats {
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Stats {
        let timer = device.features().contains(wgpu::Features::TIMESTAMP_QUERY).then(|| {
            let bytes = QUERIES as u64 * 8;
            let buffer = |usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("dp gpu stats"),
                    size: bytes,
                    usage,
                    mapped_at_creation: false,
                })
            };
            Timer {
                set: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("dp gpu stats"),
                    ty: wgpu::QueryType::Timestamp,
                    count: QUERIES,
                }),
                resolved: buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
                readable: buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
                used: 0,
                period_ns: queue.get_timestamp_period() as f64,
            }
        });
        Stats { counts: Counters::default(), timer }
    }

    pub fn add(&mut self, step: Step, since: Instant) {
        let d = since.elapsed();
        let c = &mut self.counts;
        match step {
            Step::Bind => c.bind += d,
            Step::Record => c.record += d,
            Step::Submit => {
                c.submit += d;
                c.submits += 1;
            }
            Step::Poll => c.poll += d,
            Step::Wait => c.wait += d,
        }
    }

    pub fn new_buffer(&mut self) {
        self.counts.new_buffers += 1;
    }

    pub fn new_meta(&mut self) {
        self.counts.new_metas += 1;
    }

    pub fn new_bind(&mut self) {
        self.counts.new_binds += 1;
    }

    pub fn dispatch(&mut self) {
        self.counts.dispatches += 1;
    }

    /// The timestamps for a new pass to write, when there is room for them.
    pub fn pass_timestamps(&mut self) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let t = self.timer.as_mut().filter(|t| t.used + 2 <= QUERIES)?;
        t.used += 2;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &t.set,
            beginning_of_pass_write_index: Some(t.used - 2),
            end_of_pass_write_index: Some(t.used - 1),
        })
    }

    /// Before a read-back's copy: resolves the timestamps written so far into a mappable buffer.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        if let Some(t) = self.timer.as_ref().filter(|t| t.used > 0) {
            encoder.resolve_query_set(&t.set, 0..t.used, &t.resolved, 0);
            encoder.copy_buffer_to_buffer(&t.resolved, 0, &t.readable, 0, t.used as u64 * 8);
        }
    }

    /// After the read-back's wait: prints the line and starts counting again.
    pub fn report(&mut self, device: &wgpu::Device) {
        let us = |d: Duration| d.as_micros();
        let gpu = match self.timer.as_mut() {
            None => "gpu: no timestamp queries on this adapter".to_string(),
            Some(t) if t.used == 0 => "gpu: nothing timed".to_string(),
            Some(t) => {
                let times = read_times(device, t);
                let timed = t.used / 2;
                t.used = 0;
                match times {
                    Some(g) => format!(
                        "gpu: busy {:.0} us, span {:.0}, longest pass {:.0}, {timed} timed passes",
                        g.busy / 1e3,
                        g.span / 1e3,
                        g.longest / 1e3
                    ),
                    None => "gpu: the timestamps could not be read".to_string(),
                }
            }
        };
        let c = &self.counts;
        eprintln!(
            "dp gpu stats: {} dispatches, {} submits, {} new buffers, {} new metas, {} new bind groups | wall {} us; cpu: bind {}, \
             record {}, submit {}, poll {}, wait {} | {gpu}",
            c.dispatches,
            c.submits,
            c.new_buffers,
            c.new_metas,
            c.new_binds,
            us(c.since.elapsed()),
            us(c.bind),
            us(c.record),
            us(c.submit),
            us(c.poll),
            us(c.wait),
        );
        self.counts = Counters::default();
    }
}

/// The GPU's times in nanoseconds (the work has finished: the read-back waited).
struct Times {
    /// From the first pass's start to the last one's end.
    span: f64,
    /// The sum of the passes' durations.
    busy: f64,
    /// The longest pass.
    longest: f64,
}

fn read_times(device: &wgpu::Device, t: &Timer) -> Option<Times> {
    let bytes = t.used as u64 * 8;
    let (tx, rx) = std::sync::mpsc::channel();
    t.readable.slice(..bytes).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).ok()?;
    rx.recv().ok()?.ok()?;
    let times = {
        let view = t.readable.slice(..bytes).get_mapped_range().ok()?;
        let ticks: &[u64] = bytemuck::cast_slice(&view);
        let ns = |a: u64, b: u64| b.saturating_sub(a) as f64 * t.period_ns;
        let intervals = ticks.chunks_exact(2).map(|p| ns(p[0], p[1]));
        Times {
            span: ns(*ticks.first()?, *ticks.last()?),
            busy: intervals.clone().sum(),
            longest: intervals.fold(0.0, f64::max),
        }
    };
    t.readable.unmap();
    Some(times)
}
