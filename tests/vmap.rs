//! `vmap` (issue 15) through the session's API: how the checker types it (`Slice d a`,
//! `Batch b c`), and
//! that it batches operations rather than calls. Its values are compared with JAX in
//! tests/programs/handlers/vmap*.dp and tests/jax/ (`vmap_agrees_with_jax_on_random_programs`).

use dp::Session;
use std::path::Path;

fn session() -> Session {
    let mut s = Session::new().expect("the prelude loads");
    s.set_output(Box::new(std::io::sink()));
    s
}

fn ty(s: &mut Session, e: &str) -> String {
    s.type_of("<t>", e).unwrap_or_else(|d| format!("error: {}", d.message))
}

#[test]
fn vmap_types_its_result_leaf_by_leaf() {
    let mut s = session();
    // Floats and Tensors become Tensors, through tuples, records and lists.
    assert_eq!(ty(&mut s, "vmap (fun x -> sum x)"), "Tensor -> Tensor");
    assert_eq!(ty(&mut s, "vmap (fun x -> (sum x, [x, x]))"), "Tensor -> (Tensor, List Tensor)");
    // A Float parameter takes a Float (the same for every example) or a rank-1 Tensor (its
    // elements): the argument's type says which.
    assert_eq!(
        ty(&mut s, "vmap (fun (x, (s : Float)) -> { a = s * sum x, b = x })"),
        "Slice a Float => (Tensor, a) -> { a : Tensor, b : Tensor }"
    );
    assert_eq!(ty(&mut s, "vmap (fun (x : Float) -> x * x) (tensor [1.0, 2.0])"), "Tensor");
    assert_eq!(ty(&mut s, "vmap (fun (x, (s : Float)) -> x * s) (tensor [1.0], 2.0)"), "Tensor");
    assert_eq!(ty(&mut s, "vmap (grad (fun x -> sin x * x)) (tensor [1.0, 2.0])"), "Tensor");
    // A mapped function not yet known: the constraints wait in the type.
    assert_eq!(ty(&mut s, "fun f -> vmap f"), "(Slice c a, Batch b d) => (a -> b) -> c -> d");
    // Known later: solved then (an argument used by no operation stays a variable).
    assert_eq!(ty(&mut s, "vmap (fun x -> (x, 2.0))"), "(Slice a c, Batch c b) => a -> (b, Tensor)");
    // An example left open where the argument has a Tensor is a Tensor.
    assert_eq!(ty(&mut s, "vmap (fun x -> x) (tensor [1.0])"), "Tensor");
    assert_eq!(ty(&mut s, "let ys = vmap (fun x -> x) (tensor [1.0]) in ys"), "Tensor");
    assert_eq!(ty(&mut s, "let v f = vmap f in v (fun x -> (sum x, 2.0))"), "Tensor -> (Tensor, Tensor)");
    // Leaves with no batched form are type errors.
    for bad in ["vmap (fun x -> (sum x, 1))", "vmap (fun x -> sum x > 0.0)", "vmap (fun x -> fun y -> x)"] {
        let t = ty(&mut s, bad);
        assert!(t.starts_with("error: `vmap` cannot stack results of type"), "{bad}: {t}");
    }
    // A Tensor leaf of the argument where the function takes neither a Tensor nor a Float.
    let t = ty(&mut s, "let over f = vmap f (tensor [1.0]) in over (fun (xs : List Float) -> 1.0)");
    assert!(t.starts_with("error: `vmap` cannot give a function of `List Float` the examples of a Tensor"), "{t}");
}

/// `vmap f xs` runs `f` once, whatever the batch size: with fuel for a few hundred calls (each
/// dp call spends one), a batch of 20000 examples goes through a function that makes several
/// calls per example — which a loop over the examples could not do.
#[test]
fn vmap_batches_operations_not_calls() {
    let mut s = session();
    let program = "let w = reshape (arange 12) [3, 4]\n\
                   let layer x = tanh (w @ x) * 0.5\n\
                   let shift_relu x = relu (x - 1.0)\n\
                   let f x = sum (layer (shift_relu x))\n\
                   let xs = reshape (arange 80000) [20000, 4]\n\
                   let r = vmap (fun x -> f (x * 0.001)) xs\n\
                   let () = println (shape r)\n";
    s.set_fuel(Some(300));
    let r = s.eval("<vmap>", program, Path::new("."));
    assert!(r.is_ok(), "{:?}", r.err().map(|d| d.message));
    // The same per example runs out of fuel.
    let looped = "let ys = to_list (sum_axis xs 1)\nlet _ = map (fun y -> sin y) ys\n";
    s.set_fuel(Some(300));
    let r = s.eval("<loop>", looped, Path::new("."));
    assert!(r.is_err_and(|d| d.message.contains("out of fuel")));
}
