//! A GPU tensor whose read-back fails is an error for every host-side view of it, never a
//! panic. Its own process: the buffer destroyed here must not reach another test's pool, and
//! the error wgpu records must not surface in another test's operation.
//!
//! Without a GPU adapter this passes after a notice, unless `DP_REQUIRE_GPU=1`.

use dp_tensor::{gpu, Device, Tensor};
use ndarray::{ArrayD, IxDyn};

#[test]
fn a_failed_read_back_is_an_error_not_a_panic() {
    if let Err(e) = gpu::context() {
        assert_ne!(std::env::var("DP_REQUIRE_GPU").as_deref(), Ok("1"), "DP_REQUIRE_GPU=1 but no GPU: {e}");
        eprintln!("note: skipping: no usable GPU adapter ({e})");
        return;
    }
    let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let t = Tensor::from_gpu(gpu::upload(&a).unwrap());
    t.gpu().unwrap().raw().destroy();
    let said = |r: Result<(), dp_tensor::TensorError>| r.expect_err("a read-back of a destroyed buffer").to_string();
    for e in [
        said(t.to_f64s().map(drop)),
        said(t.f32s().map(drop)),
        said(t.to_device(Device::Cpu).map(drop)),
        said(t.astype(dp_tensor::DType::F64).map(drop)),
        said(dp_tensor::npy::encode_tensor(&t).map(drop)),
    ] {
        assert!(e.contains("GPU"), "{e}");
    }
}
