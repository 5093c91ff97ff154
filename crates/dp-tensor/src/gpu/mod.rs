//! The GPU backend (DESIGN.md principle 6): tensors whose data lives in wgpu storage buffers.
//!
//! * One wgpu device per process, created on first use (`context()`), kept in a global.
//! * A GPU tensor's buffer stays on the device between operations; data comes back only when
//!   it is printed, converted to Floats or lists, compared, or saved (`download`).
//! * Each operation family is one WGSL file under `shaders/`, embedded with `include_str!`;
//!   a pipeline is compiled the first time its entry point is used and cached.
//! * Work is recorded into one pending command encoder and submitted in batches that start
//!   small after a read-back and grow (`Pending`), on a thread of their own (`submit.rs`).
//! * What a dispatch needs besides its pipeline is made once and kept: parameter buffers by
//!   their words, bind groups by their buffers (the pool's order makes a loop's buffers repeat).
//! * `DP_GPU_STATS=1` says where the time goes (`stats.rs`).
//! * Dispatches of more than 65,535 workgroups use a 2-D grid; shaders linearise the
//!   workgroup id (`wid.x + wid.y * num_workgroups.x`).
//!
//! `kernels.rs` holds the operations, `ops.rs` the op table (`ops::Backend`) on them.

pub mod fused;
pub mod kernels;
pub mod ops;
mod stats;
mod submit;

use crate::TResult;
use ndarray::{ArrayD, IxDyn};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use wgpu::util::DeviceExt;

/// Where construction builtins place new tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    Cpu,
    Gpu,
    /// The GPU when an adapter exists, else the CPU (said once on stderr).
    Auto,
}

impl DeviceChoice {
    pub fn parse(s: &str) -> TResult<DeviceChoice> {
        match s {
            "cpu" => Ok(DeviceChoice::Cpu),
            "gpu" => Ok(DeviceChoice::Gpu),
            "auto" => Ok(DeviceChoice::Auto),
            other => Err(format!("unknown device `{other}` (known: cpu, gpu, auto)").into()),
        }
    }
}

// 0 = cpu, 1 = gpu, 2 = auto (unresolved), 3 = auto resolved to the CPU.
static DEFAULT_DEVICE: AtomicU8 = AtomicU8::new(0);

/// Sets the default device (`--device`). `Gpu` creates the device now, so a missing adapter is
/// reported before anything runs.
pub fn set_default_device(d: DeviceChoice) -> TResult<()> {
    if d == DeviceChoice::Gpu {
        context()?;
    }
    DEFAULT_DEVICE.store(
        match d {
            DeviceChoice::Cpu => 0,
            DeviceChoice::Gpu => 1,
            DeviceChoice::Auto => 2,
        },
        Ordering::SeqCst,
    );
    Ok(())
}

/// True when new tensors go to the GPU (resolving `auto` on first use).
pub fn default_is_gpu() -> TResult<bool> {
    match DEFAULT_DEVICE.load(Ordering::SeqCst) {
        1 => Ok(true),
        2 => match context() {
            Ok(_) => {
                DEFAULT_DEVICE.store(1, Ordering::SeqCst);
                Ok(true)
            }
            Err(e) => {
                DEFAULT_DEVICE.store(3, Ordering::SeqCst);
                let first = e.msg.split(". ").next().unwrap_or(&e.msg);
                eprintln!("dp: --device auto: {first}; using the CPU");
                Ok(false)
            }
        },
        _ => Ok(false),
    }
}

/// With `DP_GPU_TRACE=1`, says on stderr when GPU data goes to the host: CPU fallbacks and
/// read-backs (to find what keeps a program from staying on the GPU).
pub fn trace(what: impl FnOnce() -> String) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var("DP_GPU_TRACE").is_ok_and(|v| v == "1")) {
        eprintln!("dp gpu: {}", what());
    }
}

/// The default device (`auto` resolved): where tensors made from Floats go.
pub fn default_device() -> TResult<crate::Device> {
    Ok(if default_is_gpu()? { crate::Device::Gpu } else { crate::Device::Cpu })
}

/// The process's GPU: device, queue, compiled pipelines, pending commands, a buffer pool.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    modules: Mutex<HashMap<&'static str, wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<(&'static str, &'static str), wgpu::ComputePipeline>>,
    /// Pipelines of generated shaders (`fused`), by their source after the fixed prelude.
    generated: Mutex<HashMap<String, wgpu::ComputePipeline>>,
    /// Parameter buffers by their words (`meta`): a loop dispatches the same shapes again.
    metas: Mutex<HashMap<Vec<u32>, wgpu::Buffer>>,
    /// Bind groups by pipeline and buffers. Making one is most of a dispatch's CPU time (about
    /// 4 µs on an H200's host), and a training loop binds the same buffers again each step
    /// once the pool hands them out in a fixed order (`Pool`).
    binds: Mutex<HashMap<BindKey, wgpu::BindGroup>>,
    pending: Mutex<Pending>,
    pool: Mutex<Pool>,
    /// Mappable buffers that small read-backs copy into, kept for the next read of their size
    /// (a loop reads its loss back every step).
    staging: Mutex<Vec<wgpu::Buffer>>,
    /// The first error wgpu reported outside an operation's own checks (validation, memory).
    error: Arc<Mutex<Option<String>>>,
    /// `DP_GPU_STATS=1`: where the time goes (stats.rs).
    stats: Option<Arc<Mutex<stats::Stats>>>,
    submitter: submit::Submitter,
    /// The most operations recorded before the pending encoder is submitted anyway.
    batch: usize,
    /// How long a read-back polls for its answer before blocking (`wait_for`): `SPIN` on a
    /// discrete GPU, none on others (on a CPU's Vulkan, lavapipe, polling would take a core
    /// from the threads doing the work); `DP_GPU_SPIN_US` sets it.
    spin: std::time::Duration,
}

/// Commands recorded and not yet submitted. Consecutive dispatches share one compute pass
/// (wgpu places the barriers between them that their buffers need); any other command ends it.
///
/// Submissions grow: after the GPU has drained (at a read-back) the next one goes after
/// `FIRST_BATCH` operations, so the GPU starts while the CPU records the rest, and each one
/// after doubles up to the largest batch, so a long run of operations pays for few
/// submissions (a submission costs about 20 µs of CPU on an H200 through wgpu's Vulkan
/// backend; bench/RESULTS.md).
struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    ops: usize,
    /// Operations after which the pending commands are submitted.
    batch: usize,
}

impl Pending {
    /// The commands to submit, leaving nothing pending.
    fn take(&mut self) -> Option<submit::Batch> {
        self.ops = 0;
        let pass = self.pass.take();
        self.encoder.take().map(|encoder| submit::Batch { pass, encoder })
    }
}

/// What a bind group binds: the pipeline (its layout) and each binding's buffer.
#[derive(PartialEq, Eq, Hash)]
struct BindKey {
    pipeline: wgpu::ComputePipeline,
    buffers: Vec<(u32, wgpu::Buffer)>,
}

/// Free buffers by size. The lowest of a size (in wgpu's fixed order of buffers) is handed
/// out first, not the last one freed: then a loop that allocates and frees the same way each
/// step settles into the same buffers each step, and its bind groups are found in
/// `Gpu::binds` (W6's staged step on lavapipe: 305, 196, 110, then 33 of its 428 bind groups
/// new in steps 2 to 5, the 33 those of parameters that change each step; handed out
/// last-freed-first, 215 were still new in step 10).
#[derive(Default)]
struct Pool {
    free: HashMap<u64, BTreeSet<wgpu::Buffer>>,
    bytes: u64,
}

/// Buffers kept for reuse at most (they are recycled by exact size: training loops repeat).
const POOL_LIMIT: u64 = 1 << 30;
/// Generated pipelines kept at most (a staged program has a few dozen chains).
const GENERATED_LIMIT: usize = 512;
/// Parameter buffers kept for reuse at most.
const META_LIMIT: usize = 4096;
/// Bind groups kept for reuse at most.
const BIND_LIMIT: usize = 8192;
/// Read-back buffers kept for reuse at most, and the largest kept.
const STAGING_LIMIT: usize = 8;
const STAGING_MAX_BYTES: u64 = 1 << 20;

/// The most operations recorded before the pending encoder is submitted anyway
/// (`DP_GPU_BATCH` overrides it, to measure what a submission costs).
const BATCH: usize = 64;
/// The operations in the first submission after the GPU has drained.
const FIRST_BATCH: usize = 8;
/// The operations in the first submission after the GPU has drained, where `largest` is the
/// most in any submission (`DP_GPU_BATCH` may set it below `FIRST_BATCH`).
fn first_batch(largest: usize) -> usize {
    FIRST_BATCH.min(largest)
}

/// How long a read-back polls on a discrete GPU before blocking.
const SPIN: std::time::Duration = std::time::Duration::from_millis(2);

static CONTEXT: OnceLock<TResult<Gpu>> = OnceLock::new();

/// The names of the backends this build can use on this platform.
pub fn backends_tried() -> String {
    let enabled = wgpu::Instance::enabled_backend_features();
    let names: Vec<&str> = [
        (wgpu::Backends::VULKAN, "Vulkan"),
        (wgpu::Backends::METAL, "Metal"),
        (wgpu::Backends::DX12, "DX12"),
        (wgpu::Backends::GL, "OpenGL"),
    ]
    .iter()
    .filter(|(b, _)| enabled.contains(*b))
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        "none (this build has no GPU backend for this platform)".to_string()
    } else {
        names.join(", ")
    }
}

/// The GPU, created on first use; an error names the backends that were tried.
pub fn context() -> TResult<&'static Gpu> {
    match CONTEXT.get_or_init(create) {
        Ok(g) => Ok(g),
        Err(e) => Err(e.clone()),
    }
}

/// How long `shutdown` waits for the GPU at most, submission and queue together.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Quiesces the GPU before the process exits (every way out of `dp`: the end of a program, a
/// run-time error, `exit`, the REPL's and the kernel's end). The submission thread submits what
/// it was handed and is joined, the queue is closed to every thread, and the device is waited
/// on until it is idle. Without it `exit` can run the driver's exit-time handlers (LLVM's, on
/// lavapipe) while a submission or the GPU's work is still under way: 1–2% of runs ending with
/// unread GPU work died at exit (SIGSEGV, or glibc's "corrupted size vs. prev_size").
///
/// A no-op when the GPU was never used, idempotent, and bounded (`SHUTDOWN_WAIT`): a lost
/// device or a hung driver does not keep the process from ending. Commands recorded and not
/// yet handed over are left unsubmitted (nothing can read their results); GPU work after it
/// fails.
pub fn shutdown() {
    let Some(Ok(g)) = CONTEXT.get() else { return };
    let deadline = std::time::Instant::now() + SHUTDOWN_WAIT;
    if !g.submitter.shutdown(deadline) {
        trace(|| "shutdown: a submission did not finish in time; exiting anyway".to_string());
        return;
    }
    let timeout = deadline.saturating_duration_since(std::time::Instant::now());
    match g.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(timeout) }) {
        Ok(_) => trace(|| "shutdown: the queue is idle".to_string()),
        Err(e) => trace(|| format!("shutdown: waiting for the GPU: {e}; exiting anyway")),
    }
}

/// True when a GPU is available (creating it if needed).
pub fn available() -> bool {
    context().is_ok()
}

fn create() -> TResult<Gpu> {
    let tried = backends_tried();
    if wgpu::Instance::enabled_backend_features().is_empty() {
        return Err(format!("no GPU adapter found (backends tried: {tried})").into());
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| {
        format!(
            "no GPU adapter found (backends tried: {tried}). wgpu: {e}. On Linux install a Vulkan \
             driver, e.g. Mesa's software one: apt-get install mesa-vulkan-drivers libvulkan1"
        )
    })?;
    let info = adapter.get_info();
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("dp"),
        required_features: stats::features(adapter.features()),
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .map_err(|e| format!("the GPU adapter `{}` ({:?}) refused a device: {e}", info.name, info.backend))?;
    trace(|| format!("adapter {} ({:?}, {:?})", info.name, info.backend, info.device_type));
    let error = Arc::new(Mutex::new(None));
    let slot = error.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut s) = slot.lock() {
            s.get_or_insert_with(|| e.to_string());
        }
    }));
    let stats = stats::enabled().then(|| Arc::new(Mutex::new(stats::Stats::new(&device, &queue))));
    let submitter = submit::Submitter::new(&device, &queue, stats.clone());
    let batch = std::env::var("DP_GPU_BATCH").ok().and_then(|v| v.parse().ok()).filter(|&b| b > 0).unwrap_or(BATCH);
    let spin = match std::env::var("DP_GPU_SPIN_US").ok().and_then(|v| v.parse().ok()) {
        Some(us) => std::time::Duration::from_micros(us),
        None if info.device_type == wgpu::DeviceType::DiscreteGpu => SPIN,
        None => std::time::Duration::ZERO,
    };
    Ok(Gpu {
        device,
        queue,
        info,
        limits,
        modules: Mutex::new(HashMap::new()),
        pipelines: Mutex::new(HashMap::new()),
        generated: Mutex::new(HashMap::new()),
        metas: Mutex::new(HashMap::new()),
        binds: Mutex::new(HashMap::new()),
        pending: Mutex::new(Pending { encoder: None, pass: None, ops: 0, batch: first_batch(batch) }),
        pool: Mutex::new(Pool::default()),
        staging: Mutex::new(Vec::new()),
        error,
        stats,
        submitter,
        batch,
        spin,
    })
}

/// A one-line description of the adapter (for `--device` diagnostics and tests).
pub fn describe() -> TResult<String> {
    let g = context()?;
    Ok(format!("{} ({:?}, {:?})", g.info.name, g.info.backend, g.info.device_type))
}

/// A device buffer of f32s, returned to the pool when dropped.
pub struct GpuBuffer {
    buf: Option<wgpu::Buffer>,
    size: u64,
}

impl GpuBuffer {
    pub fn raw(&self) -> &wgpu::Buffer {
        self.buf.as_ref().expect("a live buffer")
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        let (Some(buf), Ok(g)) = (self.buf.take(), context()) else { return };
        if let Ok(mut pool) = g.pool.lock() {
            if pool.bytes + self.size <= POOL_LIMIT {
                pool.bytes += self.size;
                pool.free.entry(self.size).or_default().insert(buf);
                return;
            }
        }
        // The buffer leaves the pool: cached bind groups must not keep its memory alive.
        if let Ok(mut binds) = g.binds.lock() {
            binds.clear();
        }
    }
}

/// A tensor on the GPU: a shared, immutable buffer (a reshape shares it), its shape, and the
/// host copy once it has been read back.
#[derive(Clone)]
pub struct GpuTensor {
    pub buf: Arc<GpuBuffer>,
    pub shape: Vec<usize>,
    host: Arc<OnceLock<ArrayD<f32>>>,
}

impl std::fmt::Debug for GpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuTensor{:?}", self.shape)
    }
}

impl GpuTensor {
    pub fn new(buf: Arc<GpuBuffer>, shape: Vec<usize>) -> GpuTensor {
        GpuTensor { buf, shape, host: Arc::new(OnceLock::new()) }
    }
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn raw(&self) -> &wgpu::Buffer {
        self.buf.raw()
    }
    /// The same data under another shape (no copy).
    pub fn reshaped(&self, shape: Vec<usize>) -> GpuTensor {
        GpuTensor::new(self.buf.clone(), shape)
    }
    /// The data on the host, read back once and kept (GPU tensors are immutable). A failed
    /// read-back (the device lost, a mapping refused) is an error, and the next call tries
    /// again.
    pub fn host(&self) -> TResult<&ArrayD<f32>> {
        if let Some(h) = self.host.get() {
            return Ok(h);
        }
        let data = download(self).map_err(|e| format!("reading a tensor back from the GPU failed: {e}"))?;
        let a = ArrayD::from_shape_vec(IxDyn(&self.shape), data).map_err(|e| e.to_string())?;
        Ok(self.host.get_or_init(|| a))
    }
    /// Mutable access for in-place accumulation: only when nothing else shares the buffer.
    pub fn unique_mut(&mut self) -> Option<&wgpu::Buffer> {
        let b = Arc::get_mut(&mut self.buf)?;
        self.host = Arc::new(OnceLock::new());
        b.buf.as_ref()
    }
}

fn bytes_of(n: usize) -> u64 {
    // Never zero (an empty binding is invalid), a multiple of 16 for copies and clears.
    (n.max(1) as u64 * 4).div_ceil(16) * 16
}

impl Gpu {
    fn check_size(&self, bytes: u64) -> TResult<()> {
        let max = self.limits.max_buffer_size.min(self.limits.max_storage_buffer_binding_size);
        if bytes > max {
            return Err(format!(
                "a tensor of {bytes} bytes exceeds the GPU's largest buffer ({max} bytes on {})",
                self.info.name
            )
            .into());
        }
        Ok(())
    }

    /// An uninitialised buffer for `n` floats (recycled when one of that size is free).
    pub fn alloc(&self, n: usize) -> TResult<Arc<GpuBuffer>> {
        let size = bytes_of(n);
        self.check_size(size)?;
        if let Ok(mut pool) = self.pool.lock() {
            if let Some(b) = pool.free.get_mut(&size).and_then(|f| f.pop_first()) {
                pool.bytes -= size;
                return Ok(Arc::new(GpuBuffer { buf: Some(b), size }));
            }
        }
        self.note(stats::Stats::new_buffer);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("dp tensor"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.take_error()?;
        Ok(Arc::new(GpuBuffer { buf: Some(buf), size }))
    }

    /// A buffer holding `data`.
    pub fn upload(&self, data: &[f32]) -> TResult<Arc<GpuBuffer>> {
        let size = bytes_of(data.len());
        self.check_size(size)?;
        let mut bytes: Vec<u8> = bytemuck::cast_slice(data).to_vec();
        bytes.resize(size as usize, 0);
        let buf = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("dp tensor"),
            contents: &bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        });
        self.take_error()?;
        Ok(Arc::new(GpuBuffer { buf: Some(buf), size }))
    }

    /// A small read-only storage buffer of parameters (shapes, strides, f32 bits). Such a
    /// buffer is never written after it is made, so one per distinct list of words is kept and
    /// shared (at most `META_LIMIT`, the cache emptied when full) instead of allocating one
    /// per dispatch (on lavapipe that cut the CPU time of 20,000 small adds from 0.88 to 0.77 s).
    pub fn meta(&self, words: &[u32]) -> wgpu::Buffer {
        let w: &[u32] = if words.is_empty() { &[0] } else { words };
        let Ok(mut metas) = self.metas.lock() else {
            return self.meta_buffer(w);
        };
        if let Some(b) = metas.get(w) {
            return b.clone();
        }
        if metas.len() >= META_LIMIT {
            metas.clear();
        }
        self.note(stats::Stats::new_meta);
        let b = self.meta_buffer(w);
        metas.insert(w.to_vec(), b.clone());
        b
    }

    fn meta_buffer(&self, words: &[u32]) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("dp meta"),
            contents: bytemuck::cast_slice(words),
            usage: wgpu::BufferUsages::STORAGE,
        })
    }

    /// Applies `f` to the statistics when `DP_GPU_STATS=1`.
    fn note(&self, f: impl FnOnce(&mut stats::Stats)) {
        if let Some(mut s) = self.stats.as_ref().and_then(|s| s.lock().ok()) {
            f(&mut s);
        }
    }

    /// The clock's reading when statistics are kept, for `timed`.
    fn clock(&self) -> Option<std::time::Instant> {
        self.stats.as_ref().map(|_| std::time::Instant::now())
    }

    /// Adds the time since `start` (from `clock`) to `step`.
    fn timed(&self, step: stats::Step, start: Option<std::time::Instant>) {
        if let Some(t) = start {
            self.note(|s| s.add(step, t));
        }
    }

    /// The first error wgpu reported, if any (cleared).
    pub fn take_error(&self) -> TResult<()> {
        match self.error.lock().ok().and_then(|mut e| e.take()) {
            Some(e) => Err(format!("GPU error: {e}").into()),
            None => Ok(()),
        }
    }

    /// The cached pipeline of `entry` in the shader `file` (compiled on first use).
    pub fn pipeline(
        &self,
        file: &'static str,
        source: &'static str,
        entry: &'static str,
    ) -> TResult<wgpu::ComputePipeline> {
        let mut pipes = self.pipelines.lock().map_err(|_| "GPU pipeline cache poisoned")?;
        if let Some(p) = pipes.get(&(file, entry)) {
            return Ok(p.clone());
        }
        let mut mods = self.modules.lock().map_err(|_| "GPU shader cache poisoned")?;
        let module = mods
            .entry(file)
            .or_insert_with(|| {
                self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(file),
                    source: wgpu::ShaderSource::Wgsl(source.into()),
                })
            })
            .clone();
        let p = self.compute_pipeline(&module, entry);
        self.take_error().map_err(|e| format!("compiling {file}:{entry}: {e}"))?;
        pipes.insert((file, entry), p.clone());
        Ok(p)
    }

    fn compute_pipeline(&self, module: &wgpu::ShaderModule, entry: &'static str) -> wgpu::ComputePipeline {
        self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        })
    }

    /// The cached pipeline of the entry point `entry` of a generated shader, `prelude` (fixed
    /// text: functions the body calls) followed by `body`, compiled the first time the body is
    /// seen (at most `GENERATED_LIMIT` kept, the cache emptied when full). The cache is keyed
    /// by the body alone, so a dispatch does not hash and compare the 8 KB prelude each time.
    pub fn generated_pipeline(
        &self,
        prelude: &'static str,
        body: String,
        entry: &'static str,
    ) -> TResult<wgpu::ComputePipeline> {
        let mut pipes = self.generated.lock().map_err(|_| "GPU pipeline cache poisoned")?;
        if let Some(p) = pipes.get(&body) {
            return Ok(p.clone());
        }
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(entry),
            source: wgpu::ShaderSource::Wgsl(format!("{prelude}\n{body}").into()),
        });
        let p = self.compute_pipeline(&module, entry);
        self.take_error().map_err(|e| format!("compiling a generated `{entry}` shader: {e}"))?;
        if pipes.len() >= GENERATED_LIMIT {
            pipes.clear();
        }
        pipes.insert(body, p.clone());
        Ok(p)
    }

    /// Records one dispatch of `pipeline` over `groups` workgroups (a 2-D grid when there are
    /// more than 65,535), binding `buffers` to bindings 0, 1, 2, ... of group 0 in order.
    pub fn dispatch(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
        groups: u64,
    ) -> TResult<()> {
        let (x, y) = grid(groups, self.limits.max_compute_workgroups_per_dimension as u64)?;
        self.dispatch_xy(pipeline, buffers, x, y)
    }

    /// Records one dispatch over an explicit 2-D grid of workgroups.
    pub fn dispatch_xy(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
        x: u32,
        y: u32,
    ) -> TResult<()> {
        self.dispatch_xyz(pipeline, buffers, x, y, 1)
    }

    /// The largest number of workgroups along one axis of a grid.
    pub fn max_groups(&self) -> u32 {
        self.limits.max_compute_workgroups_per_dimension
    }

    /// Records one dispatch over an explicit 3-D grid of workgroups.
    pub fn dispatch_xyz(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
        x: u32,
        y: u32,
        z: u32,
    ) -> TResult<()> {
        if x == 0 || y == 0 || z == 0 {
            return Ok(());
        }
        let max = self.limits.max_compute_workgroups_per_dimension;
        if x > max || y > max || z > max {
            return Err(format!(
                "a GPU dispatch of {x} × {y} × {z} workgroups exceeds the limit of {max} per dimension"
            )
            .into());
        }
        let start = self.clock();
        let bind = self.bind_group(pipeline, buffers)?;
        self.timed(stats::Step::Bind, start);
        let start = self.clock();
        let mut p = self.pending.lock().map_err(|_| "GPU command queue poisoned")?;
        let Pending { encoder, pass, .. } = &mut *p;
        let mut stats = self.stats.as_ref().and_then(|s| s.lock().ok());
        let pass = pass.get_or_insert_with(|| {
            let enc = encoder.get_or_insert_with(|| self.encoder());
            let timestamp_writes = stats.as_mut().and_then(|s| s.pass_timestamps());
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes }).forget_lifetime()
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(x, y, z);
        if let Some(s) = stats.as_mut() {
            s.dispatch();
        }
        drop(stats);
        self.timed(stats::Step::Record, start);
        self.recorded(p)
    }

    /// The bind group of `buffers` for `pipeline`, made the first time the pair is seen (at
    /// most `BIND_LIMIT` kept, the cache emptied when full or when a buffer leaves the pool).
    fn bind_group(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> TResult<wgpu::BindGroup> {
        let key = BindKey {
            pipeline: pipeline.clone(),
            buffers: buffers.iter().map(|&(binding, b)| (binding, b.clone())).collect(),
        };
        let mut binds = self.binds.lock().map_err(|_| "GPU bind group cache poisoned")?;
        if let Some(b) = binds.get(&key) {
            return Ok(b.clone());
        }
        self.note(stats::Stats::new_bind);
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|(binding, b)| wgpu::BindGroupEntry { binding: *binding, resource: b.as_entire_binding() })
            .collect();
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        if binds.len() >= BIND_LIMIT {
            binds.clear();
        }
        binds.insert(key, bind.clone());
        Ok(bind)
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
    }

    /// Records commands other than dispatches into the pending encoder (ending its compute
    /// pass).
    pub fn record(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> TResult<()> {
        let mut p = self.pending.lock().map_err(|_| "GPU command queue poisoned")?;
        p.pass = None;
        f(p.encoder.get_or_insert_with(|| self.encoder()));
        self.recorded(p)
    }

    /// Counts one recorded operation; hands the pending commands to the submission thread
    /// when the current batch is full, and lets the next batch be twice as long (`Pending`).
    fn recorded(&self, mut p: std::sync::MutexGuard<'_, Pending>) -> TResult<()> {
        p.ops += 1;
        if p.ops >= p.batch {
            p.batch = (p.batch * 2).min(self.batch);
            let batch = p.take();
            drop(p);
            if let Some(batch) = batch {
                self.submitter.submit(batch);
            }
        }
        self.take_error()
    }

    /// Submits whatever is pending, after everything handed to the submission thread, before
    /// waiting for the GPU to finish it all (so the next submission starts small again).
    fn flush(&self) -> TResult<()> {
        let batch = {
            let mut p = self.pending.lock().map_err(|_| "GPU command queue poisoned")?;
            p.batch = first_batch(self.batch);
            p.take()
        };
        self.submitter.submit_here(batch)?;
        self.take_error()
    }

    /// The answer of a `map_async` whose work has been submitted. On a discrete GPU it is
    /// polled for, up to `spin`, before blocking: a blocking wait adds the operating system's
    /// wake-up to every read-back, and a training loop reads its loss back every step.
    fn wait_for<T>(&self, rx: &std::sync::mpsc::Receiver<T>) -> TResult<Result<T, std::sync::mpsc::RecvError>> {
        let start = std::time::Instant::now();
        while start.elapsed() < self.spin {
            if let Ok(answer) = rx.try_recv() {
                return Ok(Ok(answer));
            }
            let _ = self.device.poll(wgpu::PollType::Poll);
            std::hint::spin_loop();
        }
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| format!("waiting for the GPU: {e}"))?;
        Ok(rx.recv())
    }

    /// Reads `n` floats of `buf` back to the host (waits for the work before it).
    pub fn read(&self, buf: &wgpu::Buffer, n: usize) -> TResult<Vec<f32>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        trace(|| format!("read back {n} value{}", if n == 1 { "" } else { "s" }));
        let size = bytes_of(n);
        let kept = self.staging.lock().ok().and_then(|mut kept| {
            let i = kept.iter().position(|b| b.size() == size)?;
            Some(kept.swap_remove(i))
        });
        let staging = kept.unwrap_or_else(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("dp readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        self.record(|enc| {
            enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
            self.note(|s| s.resolve(enc));
        })?;
        self.flush()?;
        let start = self.clock();
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        match self.wait_for(&rx)? {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("reading GPU memory: {e}").into()),
            Err(_) => return Err("reading GPU memory: the mapping never completed".to_string().into()),
        }
        self.timed(stats::Step::Wait, start);
        self.note(|s| s.report(&self.device));
        let out = {
            let view = staging.get_mapped_range(..).map_err(|e| format!("reading GPU memory: {e}"))?;
            bytemuck::cast_slice::<u8, f32>(&view)[..n].to_vec()
        };
        staging.unmap();
        if size <= STAGING_MAX_BYTES {
            if let Ok(mut kept) = self.staging.lock() {
                if kept.len() >= STAGING_LIMIT {
                    kept.remove(0);
                }
                kept.push(staging);
            }
        }
        self.take_error()?;
        Ok(out)
    }
}

/// The workgroup grid for `groups` workgroups: (x, 1) up to the per-dimension limit, else a
/// 2-D grid whose x·y ≥ groups (shaders skip the surplus).
pub fn grid(groups: u64, max: u64) -> TResult<(u32, u32)> {
    if groups <= max {
        return Ok((groups as u32, 1));
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(format!("{groups} workgroups is more than one GPU dispatch can hold").into());
    }
    let x = groups.div_ceil(y);
    Ok((x as u32, y as u32))
}

/// A new GPU tensor holding `a`.
pub fn upload(a: &ArrayD<f32>) -> TResult<GpuTensor> {
    let g = context()?;
    let data: Vec<f32> = a.iter().copied().collect();
    Ok(GpuTensor::new(g.upload(&data)?, a.shape().to_vec()))
}

/// The data of a GPU tensor, in row-major order.
pub fn download(t: &GpuTensor) -> TResult<Vec<f32>> {
    if let Some(h) = t.host.get() {
        return Ok(h.iter().copied().collect());
    }
    context()?.read(t.raw(), t.len())
}

#[cfg(test)]
mod tests {
    use super::grid;

    #[test]
    fn grids_split_past_the_dimension_limit() {
        assert_eq!(grid(10, 65535), Ok((10, 1)));
        assert_eq!(grid(65535, 65535), Ok((65535, 1)));
        let (x, y) = grid(65536 * 3 + 7, 65535).unwrap();
        assert!(x as u64 * y as u64 >= 65536 * 3 + 7 && x <= 65535 && y == 4);
        assert!(grid(65535u64 * 65535 + 1, 65535).is_err());
    }
}
