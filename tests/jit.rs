//! Staging (`jit`, src/stage/): staged functions and their derivatives compared with JAX, the
//! signature cache observed through `DP_JIT_LOG`, and the optimisations through `DP_DUMP_IR`.
//! (The scalar property test, against the native derivatives of random expressions, is in
//! ad.rs beside its generator; the refusals are error programs, tests/programs/errors/jit_*.)

use crate::golden::numbers;
use crate::run::{run_ok, run_with};
use std::process::Command;

/// One tensor operation in a loss of t (a float32 [2, 3] tensor): the dp body and the same
/// function in JAX. `u` ([2, 3]) and `m` ([3, 2]) are constants in both.
const OPS: &[(&str, &str)] = &[
    ("sum (t * t + 2.0 * t)", "jnp.sum(t * t + 2.0 * t)"),
    ("sum ((t - u) / (t * t + 1.0))", "jnp.sum((t - u) / (t * t + 1.0))"),
    ("sum ((t * t + 1.0) ** 1.5)", "jnp.sum((t * t + 1.0) ** 1.5)"),
    ("sum (t ** 3.0 - u ** 2.0)", "jnp.sum(t ** 3.0 - u ** 2.0)"),
    ("sum ((t * t + 1.0) ** u)", "jnp.sum((t * t + 1.0) ** u)"),
    ("sum (sin t * cos t)", "jnp.sum(jnp.sin(t) * jnp.cos(t))"),
    ("sum (exp (t * 0.5))", "jnp.sum(jnp.exp(t * 0.5))"),
    ("sum (log (t * t + 1.0))", "jnp.sum(jnp.log(t * t + 1.0))"),
    ("sum (sqrt (t * t + 1.0))", "jnp.sum(jnp.sqrt(t * t + 1.0))"),
    ("sum (tanh t * sigmoid t)", "jnp.sum(jnp.tanh(t) * jax.nn.sigmoid(t))"),
    ("sum (relu t * t)", "jnp.sum(jax.nn.relu(t) * t)"),
    ("sum (abs t * t)", "jnp.sum(jnp.abs(t) * t)"),
    ("sum (tan (t * 0.5))", "jnp.sum(jnp.tan(t * 0.5))"),
    ("sum (-t * u)", "jnp.sum(-t * u)"),
    ("sum ((t @ m) * (t @ m))", "jnp.sum((t @ m) * (t @ m))"),
    ("sum (transpose t @ t)", "jnp.sum(t.T @ t)"),
    ("mean (t * t)", "jnp.mean(t * t)"),
    ("max (t * u)", "jnp.max(t * u)"),
    (
        "sum (sum_axis (t * t) 0 * tensor [1.0, 2.0, 3.0])",
        "jnp.sum(jnp.sum(t * t, axis=0) * jnp.array([1.0, 2.0, 3.0]))",
    ),
    ("sum (mean_axis (t * u) 1 * tensor [1.0, -2.0])", "jnp.sum(jnp.mean(t * u, axis=1) * jnp.array([1.0, -2.0]))"),
    ("sum (softmax t * u)", "jnp.sum(jax.nn.softmax(t, axis=-1) * u)"),
    ("sum (log_softmax t * u)", "jnp.sum(jax.nn.log_softmax(t, axis=-1) * u)"),
    ("logsumexp (t * 2.0)", "jax.scipy.special.logsumexp(t * 2.0)"),
    ("sum (reshape t [3, 2] @ reshape u [2, 3])", "jnp.sum(t.reshape(3, 2) @ u.reshape(2, 3))"),
    (
        "sum (concat 0 [t, t * t] * concat 0 [u, u])",
        "jnp.sum(jnp.concatenate([t, t * t], 0) * jnp.concatenate([u, u], 0))",
    ),
    ("sum (slice t 1 0 2 * slice u 1 1 3)", "jnp.sum(t[:, 0:2] * u[:, 1:3])"),
    ("sum (row t 1 * tensor [1.0, 2.0, 3.0])", "jnp.sum(t[1] * jnp.array([1.0, 2.0, 3.0]))"),
    ("sum (where (greater t u) (t * t) (t * 3.0))", "jnp.sum(jnp.where(t > u, t * t, t * 3.0))"),
    ("sum (max_of t u * t)", "jnp.sum(jnp.maximum(t, u) * t)"),
    ("sum (clip (-0.5) 0.5 t * t)", "jnp.sum(jnp.clip(t, -0.5, 0.5) * t)"),
    ("sum (cumsum t 1 * u)", "jnp.sum(jnp.cumsum(t, axis=1) * u)"),
    ("sum (t * sum t) + get t [1, 2] * mean t", "jnp.sum(t * jnp.sum(t)) + t[1, 2] * jnp.mean(t)"),
    ("sum (stack 0 [t, u] * stack 0 [u, t])", "jnp.sum(jnp.stack([t, u]) * jnp.stack([u, t]))"),
    ("sum (squeeze (expand_dims t 0) 0 * u)", "jnp.sum(jnp.squeeze(jnp.expand_dims(t, 0), 0) * u)"),
];

const X: &str = "[[0.31, -1.27, 0.83], [1.12, -0.46, 0.58]]";
const Y: &str = "[[-0.7, 0.2, 1.4], [0.9, 0.35, -1.1]]";
const V: &str = "[[0.5, -0.25, 1.0], [0.75, 0.1, -0.6]]";
const U: &str = "[[0.4, 0.9, -0.3], [1.3, -0.8, 0.6]]";
const M: &str = "[[0.2, -0.5], [0.7, 0.1], [-0.3, 0.9]]";

/// Per op: `jit f` at x, `jit (grad f)`, `grad (jit f)`, `jit (value_and_grad f)`'s gradient
/// and the tangent of a staged `jvp`, each jitted function having traced at another point
/// first, so x's numbers come from a compiled program run on new inputs.
#[test]
fn staged_tensor_ops_agree_with_jax() {
    let Some(python) = crate::python::python_with(&["jax"], "the staged tensor ops' comparison with JAX") else {
        return;
    };
    let mut dp =
        format!("let u = tensor {U}\nlet m = tensor {M}\nlet x = tensor {X}\nlet y = tensor {Y}\nlet v = tensor {V}\n");
    let mut py = format!(
        "import jax, jax.numpy as jnp, jax.scipy.special\n\
         u = jnp.array({U}, dtype=jnp.float32)\nm = jnp.array({M}, dtype=jnp.float32)\n\
         x = jnp.array({X}, dtype=jnp.float32)\nv = jnp.array({V}, dtype=jnp.float32)\n\
         def show(vals): print(' '.join(repr(float(a)) for val in vals for a in jnp.ravel(jnp.asarray(val))))\n"
    );
    for (i, (d, j)) in OPS.iter().enumerate() {
        dp.push_str(&format!(
            "let f{i} = fun t -> {d}\n\
             let jf{i} = jit f{i}\nlet jg{i} = jit (grad f{i})\nlet jv{i} = jit (value_and_grad f{i})\n\
             let jt{i} = jit (fun t -> snd (jvp f{i} t v))\n\
             let _ = (jf{i} y, jg{i} y, jv{i} y, jt{i} y)\n\
             let () = println (jf{i} x, jg{i} x, grad jf{i} x, snd (jv{i} x), jt{i} x)\n"
        ));
        py.push_str(&format!(
            "f = lambda t: {j}\nshow([f(x), jax.grad(f)(x), jax.grad(f)(x), jax.grad(f)(x), jax.jvp(f, (x,), (v,))[1]])\n"
        ));
    }
    let got: Vec<Vec<f64>> = run_ok(&dp).iter().map(|l| numbers(l)).collect();
    let out = Command::new(&python).arg("-c").arg(&py).output().expect("run python");
    assert!(out.status.success(), "JAX failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let want: Vec<Vec<f64>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(|w| w.parse().expect("a JAX number")).collect())
        .collect();
    assert_eq!(got.len(), OPS.len(), "dp printed {} lines", got.len());
    assert_eq!(want.len(), OPS.len(), "JAX printed {} lines", want.len());
    for (i, ((d, _), (g, w))) in OPS.iter().zip(got.iter().zip(&want)).enumerate() {
        assert_eq!(g.len(), w.len(), "op {i} `{d}`: dp {g:?}, JAX {w:?}");
        // float32 on both sides, summed in different orders.
        let scale = w.iter().fold(1.0f64, |s, x| s.max(x.abs()));
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 2e-5 * scale + 1e-4 * a.abs().max(b.abs()), "op {i} `{d}`: dp {g:?}, JAX {w:?}");
        }
    }
}

/// The `jit:` lines of a run's stderr.
fn jit_log(src: &str) -> (Vec<String>, Vec<String>) {
    let r = run_with(&[], src, &[("DP_JIT_LOG", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    let log = r.stderr.lines().filter(|l| l.starts_with("jit: ")).map(String::from).collect();
    (r.stdout.lines().map(String::from).collect(), log)
}

#[test]
fn the_signature_cache_traces_once_per_signature() {
    let src = "let f (x, n) = if n > 0 then x * float n else x - 1.0\n\
               let j = jit f\n\
               let () = println (j (2.0, 3))\n\
               let () = println (j (5.0, 3))\n\
               let () = println (j (1.5, 2))\n\
               let () = println (j (7.0, 3))\n\
               let g x = sum (x * x)\n\
               let k = jit g\n\
               let () = println (k (tensor [1.0, 2.0]))\n\
               let () = println (k (tensor [3.0, 4.0]))\n\
               let () = println (k (tensor [1.0, 2.0, 3.0]))\n\
               let () = println (k (astype \"float64\" (tensor [1.0, 2.0, 3.0])))\n\
               let () = println (grad k (tensor [1.0, 2.0]))\n\
               let () = println (jvp k (tensor [1.0, 2.0]) (tensor [1.0, 0.0]))\n";
    let (out, log) = jit_log(src);
    assert_eq!(out[..9], ["6.0", "15.0", "3.0", "21.0", "5.0", "25.0", "14.0", "14.0", "tensor [2.0, 4.0]"]);
    assert_eq!(out.len(), 10);
    // `grad k` stages the call as one primitive of the `grad` (its own programs: a trace);
    // `jvp k` runs `g` unstaged.
    assert_eq!(
        kinds(&log),
        ["trace", "hit", "trace", "hit", "trace", "hit", "trace", "trace", "trace", "inline"],
        "{log:#?}"
    );
    assert!(log[8].starts_with("jit: trace #2 (float32 [2]) under grad"), "{}", log[8]);
    assert!(log[0].starts_with("jit: trace #1 (Float, 3)"), "{}", log[0]);
    assert!(log[3].starts_with("jit: hit #1 (Float, 3)"), "{}", log[3]);
    assert!(log[6].starts_with("jit: trace #2 (float32 [3])"), "{}", log[6]);
    assert!(log[7].starts_with("jit: trace #2 (float64 [3])"), "{}", log[7]);
}

/// `DP_JIT_LOG` shows an argument's structure, so two traces of one function say how their
/// signatures differ: a tree's shape, a list's length, a record's fields, an Int.
#[test]
fn the_log_shows_the_structure_of_each_signature() {
    let src = "type Tree = Leaf Float | Node Tree Tree\n\
               let rec run w t = match t with | Leaf x -> tanh (w * x) | Node l r -> tanh (run w l + w * run w r)\n\
               let j = jit (fun (w, t) -> run w t)\n\
               let () = println (j (0.5, Node (Leaf 1.0) (Node (Leaf 2.0) (Leaf 3.0))))\n\
               let () = println (j (0.5, Node (Node (Leaf 1.0) (Leaf 2.0)) (Leaf 3.0)))\n\
               let () = println (j (0.7, Node (Node (Leaf 4.0) (Leaf 5.0)) (Leaf 6.0)))\n\
               let k = jit (fun (r : { xs : List Float, n : Int }) -> float r.n * sum (tensor r.xs))\n\
               let () = println (k { xs = [1.0, 2.0], n = -2 })\n\
               let () = println (k { xs = [], n = 3 })\n";
    let (out, log) = jit_log(src);
    assert_eq!(out.len(), 5, "{out:?}");
    assert_eq!(kinds(&log), ["trace", "trace", "hit", "trace", "trace"], "{log:#?}");
    assert!(
        log[0].starts_with("jit: trace #1 (Float, Node (Leaf Float) (Node (Leaf Float) (Leaf Float))) in"),
        "{}",
        log[0]
    );
    assert!(
        log[1].starts_with("jit: trace #1 (Float, Node (Node (Leaf Float) (Leaf Float)) (Leaf Float)) in"),
        "{}",
        log[1]
    );
    assert!(
        log[2].starts_with("jit: hit #1 (Float, Node (Node (Leaf Float) (Leaf Float)) (Leaf Float))"),
        "{}",
        log[2]
    );
    assert!(log[3].starts_with("jit: trace #2 ({n = -2, xs = [Float, Float]}) in"), "{}", log[3]);
    assert!(log[4].starts_with("jit: trace #2 ({n = 3, xs = []}) in"), "{}", log[4]);
}

/// A staged function whose signature changes on every call (an Int it branches on, here; a
/// tree's shape in a recursive model) runs unstaged once 32 traces have bought fewer than 16
/// hits; one whose signatures repeat keeps being staged however many it has.
#[test]
fn a_function_whose_signatures_keep_changing_runs_unstaged() {
    let src = "let f (x, n) = if n % 2 == 0 then x * float n else x - float n\n\
               let j = jit f\n\
               let rec go n acc = if n == 40 then acc else go (n + 1) (acc + j (1.5, n) - f (1.5, n))\n\
               let () = println (go 0 0.0)\n\
               let k = jit (fun p -> f p)\n\
               let rec twice n acc = if n == 40 then acc else twice (n + 1) (acc + k (0.5, n) + k (0.5, n))\n\
               let () = println (twice 0 0.0)\n\
               let h = jit (fun p -> f p)\n\
               let rec under n acc = if n == 40 then acc else\n\
               \x20 under (n + 1) (acc + grad (fun x -> h (x, n)) 1.5 - grad (fun x -> f (x, n)) 1.5)\n\
               let () = println (under 0 0.0)\n";
    let (out, log) = jit_log(src);
    assert_eq!(out[0], "0.0", "staged and unstaged calls differ: {out:?}");
    assert_eq!(out[2], "0.0", "staged and unstaged derivatives differ: {out:?}");
    let of = |id: &str| {
        log.iter().filter(|l| l.contains(id)).map(|l| l.split_whitespace().nth(1).unwrap_or("")).collect::<Vec<_>>()
    };
    let j = of("#1");
    assert_eq!(j.iter().filter(|k| **k == "trace").count(), 32, "{log:#?}");
    assert_eq!(j.iter().filter(|k| **k == "inline").count(), 8, "{log:#?}");
    assert!(
        log.iter().any(|l| l == "jit: #1: 32 signatures traced and 0 calls hit; its later calls run unstaged"),
        "{log:#?}"
    );
    let k = of("#2");
    assert_eq!(k.iter().filter(|k| **k == "trace").count(), 40, "{log:#?}");
    assert_eq!(k.iter().filter(|k| **k == "hit").count(), 40, "{log:#?}");
    assert!(!k.contains(&"inline"), "{log:#?}");
    // Under `grad` the calls are staged as primitives of the `grad` (their own cache), and
    // the same rule holds.
    let h = of("#3");
    assert_eq!(h.iter().filter(|k| **k == "trace").count(), 32, "{log:#?}");
    assert_eq!(h.iter().filter(|k| **k == "inline").count(), 8, "{log:#?}");
    let traces: Vec<&String> = log.iter().filter(|l| l.starts_with("jit: trace #3 ")).collect();
    assert!(traces.len() == 32 && traces.iter().all(|l| l.contains(" under grad ")), "{log:#?}");
}

/// What a compiled program could not repeat — reading or writing a reference made outside the
/// staged function, a `catch` whose handler runs or not by the data — makes the trace serve
/// its own call only and the function run unstaged afterwards, with the unstaged numbers; a
/// reference the function makes itself is its own state and stays staged. A refusal inside a
/// `catch` in the staged function is not the `catch`'s to take, but one around the `jit` call
/// takes it.
#[test]
fn effects_in_a_staged_function_make_it_run_unstaged() {
    let src = "let r = ref 1.0\n\
               let f x = x * !r\n\
               let j = jit f\n\
               let () = println (j 2.0, f 2.0)\n\
               let () = r := 10.0\n\
               let () = println (j 2.0, f 2.0)\n\
               let () = println (grad (fun p -> r := p; j p) 3.0, grad (fun p -> r := p; f p) 3.0)\n\
               let count = ref 0\n\
               let q x = count := !count + 1; x * 2.0\n\
               let jq = jit q\n\
               let () = println (jq 1.0, jq 2.0, jq 3.0, !count)\n\
               let t = tensor [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]\n\
               let g idx = catch (fun () -> gather t idx 0) (fun m -> zeros [2, 2])\n\
               let jg = jit g\n\
               let () = println (jg (tensor [0, 1]))\n\
               let () = println (jg (tensor [0, 7]))\n\
               let own x = let s = ref 0.0 in s := 2.0; x * !s\n\
               let jo = jit own\n\
               let () = println (jo 1.0, jo 4.0)\n\
               let branch x = catch (fun () -> if x > 0.0 then x else 0.0 - x) (fun m -> 42.0)\n\
               let () = println (catch (fun () -> show (jit branch 1.0)) (fun m -> \"refused: \" ++ m))\n\
               let flag = ref false\n\
               let w x = flag := true; x\n\
               let jw = jit w\n\
               let () = println (jw 1.0)\n\
               let () = flag := false\n\
               let () = println (jw 2.0, !flag)\n\
               let jr = jit (fun p -> p * !r)\n\
               let () = r := 3.0\n\
               let () = println (grad (fun p -> jr p) 1.0)\n\
               let () = r := 4.0\n\
               let () = println (grad (fun p -> jr p) 1.0)\n";
    let (out, log) = jit_log(src);
    assert_eq!(
        out,
        [
            "(2.0, 2.0)",
            "(20.0, 20.0)",
            "(6.0, 6.0)",
            "(2.0, 4.0, 6.0, 3)",
            "tensor [[1.0, 2.0], [3.0, 4.0]]",
            "tensor [[0.0, 0.0], [0.0, 0.0]]",
            "(2.0, 8.0)",
            "refused: jit: cannot stage a comparison (`>`) on a traced value",
            "1.0",
            "(2.0, true)",
            "3.0",
            "4.0",
        ],
        "{log:#?}"
    );
    let said = |l: &str| log.iter().any(|x| x == l);
    for (id, what) in [
        (1, "reads a reference made outside it"),
        (2, "reads a reference made outside it"),
        (3, "runs a `catch`"),
        (5, "writes a reference made outside it"),
    ] {
        assert!(
            said(&format!(
                "jit: #{id}: it {what}; its program served this call only, and its later calls run unstaged"
            )),
            "#{id}: {log:#?}"
        );
        assert!(said(&format!("jit: inline #{id} (unstaged: it {what})")), "#{id}: {log:#?}");
    }
    assert!(log.iter().any(|l| l.starts_with("jit: hit #4 ")), "a function's own reference stays staged: {log:#?}");
    assert!(log.iter().any(|l| l.starts_with("jit: trace #6 (Float) under grad")), "{log:#?}");
    assert!(said("jit: inline #6 (unstaged: it reads a reference made outside it)"), "{log:#?}");
}

/// A whole training step under `jit`, Adam's update included: the optimiser's state is data
/// (its step count a Float), so every step is the first step's signature, one trace and then
/// hits, with the unstaged loop's numbers to the last digit.
#[test]
fn a_staged_training_step_with_adam_traces_once() {
    let src = "import optim\n\
               let x = randn 1 [8, 3]\n\
               let y = randn 2 [8]\n\
               let step (p, st) =\n\
               \x20 let (l, g) = value_and_grad (fun p -> sum ((x @ p.w + p.b - y) ** 2.0)) p in\n\
               \x20 let (p', st') = optim.adam 0.05 0.9 0.999 1e-8 st p g in (l, (p', st'))\n\
               let rec train f k s = if k == 0 then s else (let (l, s') = f s in (println l; train f (k - 1) s'))\n\
               let p0 = {w = zeros [3], b = 0.0}\n\
               let (p1, _) = train step 4 (p0, optim.adam_init p0)\n\
               let (p2, _) = train (jit step) 4 (p0, optim.adam_init p0)\n\
               let () = println (to_list p1.w, p1.b)\n\
               let () = println (to_list p2.w, p2.b)\n";
    let (out, log) = jit_log(src);
    assert_eq!(out.len(), 10, "{out:?}");
    assert_eq!(out[..4], out[4..8], "the staged losses differ from the unstaged ones");
    assert_eq!(out[8], out[9], "the staged parameters differ from the unstaged ones");
    assert_eq!(kinds(&log), ["trace", "hit", "hit", "hit"], "{log:#?}");
}

#[test]
fn the_cache_keeps_a_bounded_number_of_signatures() {
    // Nine signatures (the Int is part of each): the first is evicted by the ninth, so calling
    // it again traces again (evicting the least recently used, n = 2); n = 3 is still cached.
    let src = "let j = jit (fun (x, n) -> x * float n)\n\
               let _ = map (fun n -> j (1.0, n)) [1, 2, 3, 4, 5, 6, 7, 8, 9]\n\
               let () = println (j (2.0, 1))\n\
               let () = println (j (2.0, 3))\n";
    let (out, log) = jit_log(src);
    assert_eq!(out, ["2.0", "6.0"]);
    let kinds: Vec<&str> = log.iter().map(|l| l.split_whitespace().nth(1).unwrap_or("")).collect();
    let mut want = vec!["trace"; 9];
    want.extend(["trace", "hit"]);
    assert_eq!(kinds, want, "{log:#?}");
    assert!(
        log[9].starts_with("jit: trace #1 (Float, 1)") && log[10].starts_with("jit: hit #1 (Float, 3)"),
        "{log:#?}"
    );
}

/// The IR of one staged call as DP_DUMP_IR prints it: the node lines.
fn dump(src: &str) -> Vec<String> {
    let r = run_with(&[], src, &[("DP_DUMP_IR", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    r.stderr.lines().filter(|l| l.trim_start().starts_with('%')).map(|l| l.trim().to_string()).collect()
}

#[test]
fn dead_code_drops_the_backward_pass_nobody_reads() {
    // Only the value of value_and_grad is used: the partials and the backward pass vanish.
    let ir = dump("let f x = sin x * x\nlet () = println (jit (fun x -> fst (value_and_grad f x)) 0.5)\n");
    assert_eq!(ir, ["%0 = input 0 : Float", "%1 = sin %0 : Float", "%2 = mul %1 %0 : Float"], "{ir:#?}");
    // Only the adjoint of `a`: nothing computes b's (which would be a · cos b · …).
    let ir = dump("let f (a, b) = a * sin b\nlet () = println (jit (fun p -> fst (grad f p)) (0.5, 2.0))\n");
    assert!(!ir.iter().any(|l| l.contains("cos")), "{ir:#?}");
    assert!(ir.iter().any(|l| l.contains("sin")), "{ir:#?}");
}

#[test]
fn common_subexpressions_and_identities_are_shared() {
    let ir = dump("let () = println (jit (fun x -> sin x * 1.0 + sin x) 0.5)\n");
    assert_eq!(ir, ["%0 = input 0 : Float", "%1 = sin %0 : Float", "%2 = add %1 %1 : Float"], "{ir:#?}");
    // The log line gives the sizes before and after.
    let (_, log) = jit_log("let () = println (jit (fun x -> sin x * 1.0 + sin x) 0.5)\n");
    assert!(log[0].ends_with("4 operations, 2 after optimisation"), "{log:#?}");
}

#[test]
fn staged_code_with_structures_and_loops() {
    // A record argument, a list result, recursion on an Int of the signature (unrolled).
    let src = "let rec go i acc x = if i == 0 then acc else go (i - 1) (acc * x + 1.0) x\n\
               let step p = { w = p.w - 0.1 * grad (fun w -> go p.n w p.x) p.w, n = p.n, x = p.x }\n\
               let j = jit step\n\
               let p = { w = 0.5, n = 4, x = 1.5 }\n\
               let () = println (step p == j p, (j p).w)\n\
               let h = jit (fun (a, b) -> [a + b, a * b, go 3 a b])\n\
               let () = println (h (2.0, 3.0))\n";
    let out = run_ok(src);
    // d/dw go 4 w x = x^4 (the loop computes w·x⁴ + x³ + x² + x + 1): w − 0.1 · 1.5⁴.
    let w = 0.5 - 0.1 * 1.5f64.powi(4);
    assert_eq!(out[0], format!("(true, {w:?})"));
    // go 3 2 3 = ((2·3 + 1)·3 + 1)·3 + 1 = 67.
    assert_eq!(out[1], "[5.0, 6.0, 67.0]");
}

/// W1's loop (bench/w1) under `jit (value_and_grad f)`: the trace of 6,000 iterations (80k
/// nodes, past the length at which the tracer's vectors grow at once) runs as native loops (a
/// forward loop and the backward pass's loops reading its tape in reverse), and gives the
/// machine's own numbers to the last bit, at the traced point and another.
#[test]
fn a_staged_loop_runs_as_native_loops_with_the_machines_numbers() {
    let src = "let n = 6000\n\
               let f x =\n\
               \x20 let rec go i acc = if i > n then acc else go (i + 1) (acc * 0.99 + sin (x * (float i * 1e-4)) * x) in\n\
               \x20 go 1 0.0\n\
               let j = jit (value_and_grad f)\n\
               let () = println (value_and_grad f 0.5)\n\
               let () = println (j 0.5)\n\
               let () = println (value_and_grad f (-1.75))\n\
               let () = println (j (-1.75))\n";
    let (out, log) = jit_log(src);
    assert!(out.len() == 4 && out[0] == out[1] && out[2] == out[3], "{out:?}");
    let words: Vec<&str> = log[0].split_whitespace().collect();
    let at = words.iter().position(|w| *w == "loops").expect("a native note");
    let (loops, looped, total): (usize, usize, usize) =
        (words[at - 1].parse().unwrap(), words[at + 2].parse().unwrap(), words[at + 4].parse().unwrap());
    assert!(loops >= 2 && looped * 100 >= total * 99, "{}", log[0]);
}

/// `sin` and `cos` of one value, written by the user (in a loop and in straight code after
/// it) and made by the derivative rule of `sin` under `value_and_grad`: native code takes each
/// pair from one `sincos` call, and prints the interpreter's numbers, at arguments across
/// the magnitudes (each of libm's argument reductions) and at the specials.
#[test]
fn sin_and_cos_of_one_value_give_the_machines_numbers() {
    let src = "let f x =\n\
               \x20 let rec go i acc = if i > 200 then acc else\n\
               \x20   let t = x * float i in go (i + 1) (acc * 0.5 + sin t * cos t + cos (t * 0.5))\n\
               \x20 in\n\
               \x20 let y = go 1 0.0 in\n\
               \x20 cos y - sin y * x\n\
               let j = jit f\n\
               let g = jit (value_and_grad f)\n\
               let xs = [0.3, -2.5, 0.0, 1e-8, 7.0e3, -3.0e7, 1e21, 1e300, 1.0 / 0.0, 0.0 / 0.0]\n\
               let () = iter (fun x -> println (f x, j x)) xs\n\
               let () = iter (fun x -> println (value_and_grad f x, g x)) xs\n";
    let (out, log) = jit_log(src);
    assert_eq!(out.len(), 20, "{out:?}");
    for line in &out {
        // Each line is `(machine, staged)`, each side printed the same way.
        let inner = &line[1..line.len() - 1];
        let half = inner.len() / 2;
        assert_eq!(&inner[..half - 1], &inner[half + 1..], "{line}");
    }
    assert!(log[0].contains("loops"), "{log:?}");
}

/// Native code and the executor alone (`DP_JIT_NATIVE=0`) print the same numbers, for scalar
/// code mixed with tensors, masks (relu, abs, where), powers and every math function.
#[test]
fn native_code_agrees_with_the_executor() {
    let src = "let g (x, t) =\n\
               \x20 let s = sum (t * x) in\n\
               \x20 let rec go i acc = if i == 0 then acc else go (i - 1) (relu (acc - 0.3) + abs (sin acc * x) ** 1.5 + tanh (acc * s)) in\n\
               \x20 let y = go 12 x in\n\
               \x20 y * exp (-(y * y)) + log (1.0 + sqrt (y * y)) + sigmoid y + erf y + cos y * tan (y * 0.1) - (-y) / 3.0 + sum (t * y)\n\
               let j = jit (value_and_grad g)\n\
               let t = tensor [0.5, -1.5, 2.0]\n\
               let () = println (j (0.7, t))\n\
               let () = println (j (-0.2, t))\n\
               let () = println (j (0.0, t))\n\
               let () = println (value_and_grad g (0.7, t))\n\
               let h = jit (fun x -> grad (fun y -> y ** 3.0 + relu y * abs y) x)\n\
               let () = println (h 2.0, h (-3.0), h 0.0)\n";
    let native = run_with(&[], src, &[("DP_JIT_LOG", "1")]);
    let plain = run_with(&[], src, &[("DP_JIT_NATIVE", "0")]);
    assert!(native.ok && plain.ok, "{}\n{}", native.stderr, plain.stderr);
    assert_eq!(native.stdout, plain.stdout);
    assert!(native.stderr.contains("native: "), "{}", native.stderr);
    let lines: Vec<&str> = native.stdout.lines().collect();
    // The staged gradient at the traced point is the machine's, to print precision.
    assert_eq!(lines[0], lines[3], "{}", native.stdout);
}

/// The reverse rule of `@` staged: `g @ bᵀ` and `aᵀ @ g` read the transposed operand in place
/// (no `transpose` node is left), a weight used twice gathers its second contribution inside
/// the GEMM (`+=`), and the numbers are the machine's (which runs the same kernel calls), in
/// float32 and float64.
#[test]
fn staged_products_are_single_gemm_calls_with_the_machines_numbers() {
    for dtype in ["float32", "float64"] {
        let src = format!(
            "let f (w, x) = sum (tanh (tanh (x @ w) @ w) * x)\n\
             let w = astype \"{dtype}\" (tensor [[0.5, -0.25, 1.0], [0.75, 0.1, -0.6], [0.3, 0.2, -0.9]])\n\
             let x = astype \"{dtype}\" (tensor [[0.31, -1.27, 0.83], [1.12, -0.46, 0.58], [0.2, 0.4, -0.1], [1.5, -0.3, 0.7]])\n\
             let j = jit (value_and_grad f)\n\
             let () = println (value_and_grad f (w, x))\n\
             let () = println (j (w, x))\n\
             let () = println (value_and_grad f (w * 2.0, x - 1.0))\n\
             let () = println (j (w * 2.0, x - 1.0))\n"
        );
        let r = run_with(&[], &src, &[("DP_DUMP_IR", "1")]);
        assert!(r.ok, "dp failed:\n{}", r.stderr);
        let out: Vec<&str> = r.stdout.lines().collect();
        assert!(out.len() == 4 && out[0] == out[1] && out[2] == out[3], "{dtype}: {out:#?}");
        let ir: Vec<&str> = r.stderr.lines().filter(|l| l.trim_start().starts_with('%')).collect();
        let has = |s: &str| ir.iter().any(|l| l.contains(s));
        assert!(has("gemm_nt") && has("gemm_tn") && has(" += "), "{dtype}: {ir:#?}");
        assert!(!has("transpose") && !has("= @ ") && !has("= `@` "), "{dtype}: {ir:#?}");
    }
}

/// A weight used in many matrix–vector products (a recurrent cell): the staged backward pass
/// sums its outer products as one product of the stacked vectors, as the machine's rule does
/// (`OuterSums`, float32's), so the gradient is the machine's to the last bit; in float64 both
/// add the products one by one, and agree too.
#[test]
fn staged_outer_products_are_summed_as_one_product() {
    for (dtype, stacked) in [("float32", 2), ("float64", 0)] {
        let src = format!(
            "let cast t = astype \"{dtype}\" t\n\
             let f (w, u, h0) =\n\
             \x20 let rec go k h = if k == 0 then h else go (k - 1) (tanh (w @ h + u @ h0)) in\n\
             \x20 sum (go 6 h0)\n\
             let w = cast (tensor [[0.5, -0.25, 1.0], [0.75, 0.1, -0.6], [0.3, 0.2, -0.9]])\n\
             let u = cast (tensor [[0.2, 0.4, -0.1], [1.5, -0.3, 0.7], [0.31, -1.27, 0.83]])\n\
             let h = cast (tensor [0.3, -0.7, 0.45])\n\
             let j = jit (value_and_grad f)\n"
        );
        let ir = staged_equals_unstaged_ir(dtype, &src, "(w, u, h)", "(w * 0.5, u, h - 0.25)");
        let ir: Vec<&str> = ir.iter().map(String::as_str).collect();
        // w's and u's contributions: two products of stacked vectors, and no rank-1 update of
        // a matrix left (the `gemm_nn +=` of vectors are h's adjoints).
        let count = |s: &str| ir.iter().filter(|l| l.contains(s)).count();
        assert_eq!(count("gemm_tn"), stacked, "{dtype}: {ir:#?}");
        if stacked > 0 {
            let rank1 = ir.iter().filter(|l| l.contains("gemm_nn +=") && l.ends_with("[3, 3]")).count();
            assert_eq!(rank1, 0, "{dtype}: {ir:#?}");
        }
    }
}

/// The rows of a matrix read one per step (`row xs t`, W4's inputs): the staged backward pass
/// adds each row's adjoint into the gradient's own buffer (`add_row`) instead of spreading it
/// into a matrix of zeros and adding that, and the gradient is still the machine's to the
/// last bit, in float32 and float64.
#[test]
fn row_adjoints_are_added_in_place_with_the_machines_numbers() {
    for dtype in ["float32", "float64"] {
        let src = format!(
            "let cast t = astype \"{dtype}\" t\n\
             let f (xs, w, h0) =\n\
             \x20 let rec go k h = if k == 4 then h else go (k + 1) (tanh (row xs k + w @ h)) in\n\
             \x20 sum (go 0 h0)\n\
             let xs = cast (tensor [[0.31, -1.27, 0.83], [1.12, -0.46, 0.58], [0.2, 0.4, -0.1], [1.5, -0.3, 0.7]])\n\
             let w = cast (tensor [[0.5, -0.25, 1.0], [0.75, 0.1, -0.6], [0.3, 0.2, -0.9]])\n\
             let h = cast (tensor [0.3, -0.7, 0.45])\n\
             let j = jit (value_and_grad f)\n"
        );
        let ir = staged_equals_unstaged_ir(dtype, &src, "(xs, w, h)", "(xs * 0.5, w, h - 0.25)");
        let ir: Vec<&str> = ir.iter().map(String::as_str).collect();
        let count = |s: &str| ir.iter().filter(|l| l.contains(s)).count();
        // The first row's adjoint starts the gradient (spread into zeros); the other three add.
        assert_eq!((count("add_row"), count("ScatterRow")), (3, 1), "{dtype}: {ir:#?}");
    }
}

/// Elementwise operations each read only by the next (the reverse rule of `tanh`, a clip, an
/// optimiser's update) are one `chain` node of the staged program, computed in one pass over
/// blocks of elements; every element, forward and gradient, is the machine's to the last bit
/// in float32 and float64, with Floats and single-element tensors among the operands, NaN and
/// -0 among the elements, tensors large enough to be split over the thread pool, and operands
/// that broadcast (a bias, a per-row statistic).
#[test]
fn elementwise_chains_give_the_machines_numbers() {
    for dtype in ["float32", "float64"] {
        let src = format!(
            "let cast t = astype \"{dtype}\" t\n\
             let lo = cast (tensor 0.1)\n\
             let f (x, w) =\n\
             \x20 let y = tanh (x * w + 0.5) in\n\
             \x20 let z = clip (-0.3) 0.3 (y * y - w / sqrt (w * w + 1e-8)) in\n\
             \x20 sum (z * x ** 2.0 + max_of x lo - min_of (exp (-x)) (cast (tensor 2.0)))\n\
             let update (p, g) = p - 0.1 * g / sqrt (g * g + 1e-8)\n\
             let j = jit (value_and_grad f)\n\
             let u = jit update\n\
             let show_all (l, (gx, gw)) = (println (show l); println (show (to_list gx)); println (show (to_list gw)))\n\
             let x0 = randn 1 [37, 53]\n\
             let odd = where (greater x0 1.8) (tensor (0.0 / 0.0)) (where (less x0 (-1.8)) (tensor (-0.0)) x0)\n\
             let small = (cast odd, cast (randn 2 [37, 53]))\n\
             let big = (cast (randn 3 [150, 100]), cast (randn 4 [150, 100]))\n\
             let () = show_all (value_and_grad f small)\n\
             let () = show_all (j small)\n\
             let () = show_all (value_and_grad f big)\n\
             let () = show_all (j big)\n\
             let () = println (show (to_list (update (fst big, snd big))))\n\
             let () = println (show (to_list (u (fst big, snd big))))\n\
             let bc (x, b, r) = sum (tanh ((x - r) / (r * r + 1.0) * b + b))\n\
             let jb = jit (value_and_grad bc)\n\
             let bargs = (fst big, cast (randn 5 [100]), cast (randn 6 [150, 1]))\n\
             let show3 (l, (gx, gb, gr)) = (println (show l); println (show (to_list gx)); println (show (to_list gb)); println (show (to_list gr)))\n\
             let () = show3 (value_and_grad bc bargs)\n\
             let () = show3 (jb bargs)\n"
        );
        let r = run_with(&[], &src, &[("DP_DUMP_IR", "1")]);
        assert!(r.ok, "dp failed:\n{}", r.stderr);
        let out: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(out.len(), 22, "{dtype}: {}", r.stdout);
        let pairs =
            [(0, 3), (1, 4), (2, 5), (6, 9), (7, 10), (8, 11), (12, 13), (14, 18), (15, 19), (16, 20), (17, 21)];
        for (k, (a, b)) in pairs.into_iter().enumerate() {
            assert!(out[a] == out[b], "{dtype}: line {a} unstaged, {b} staged (pair {k}) differ");
        }
        assert!(out[1].contains("nan"), "{dtype}: the NaN row reached the gradient: {}", out[1]);
        let ir: Vec<&str> = r.stderr.lines().filter(|l| l.trim_start().starts_with('%')).collect();
        let chains = ir.iter().filter(|l| l.contains("chain[")).count();
        // The update is one chain (p - 0.1 * g / sqrt (g * g + 1e-8)); the derivative has several.
        let update =
            "chain[s0 = mul #1 #2; s1 = mul #2 #2; s2 = add s1 #3; s3 = sqrt s2; s4 = div s0 s3; s5 = sub #0 s4]";
        assert!(ir.iter().any(|l| l.contains(update)), "{dtype}: {ir:#?}");
        assert!(chains >= 4, "{dtype}: {chains} chains in {ir:#?}");
        // A per-row statistic ([150, 1]) and a bias ([100]) read inside chains of [150, 100].
        for want in [
            "chain[s0 = sub #0 #1; s1 = div s0 #2] %0 %2 %4 : ",
            "chain[s0 = mul #0 #1; s1 = add s0 #1; s2 = tanh s1] %5 %1 : ",
        ] {
            assert!(ir.iter().any(|l| l.contains(want) && l.ends_with("[150, 100]")), "{dtype}: {want} in {ir:#?}");
        }
    }
}

/// A reduction whose operand is an elementwise chain read by nothing else takes the chain in
/// (`chain[…] into mean_axis`): layer norm's variance, a bias's gradient, a loss's sum are
/// computed as the chain goes, its elements never stored, and every number, forward and
/// gradient, is the machine's to the last bit in float32 and float64, on tensors small and
/// large enough to be split over the thread pool.
#[test]
fn reductions_take_in_the_chains_they_read() {
    for dtype in ["float32", "float64"] {
        let src = format!(
            "let cast t = astype \"{dtype}\" t\n\
             let norm n x = let mu = reshape (mean_axis x 1) [n, 1] in\n\
             \x20 let d = x - mu in\n\
             \x20 d / sqrt (reshape (mean_axis (d * d) 1) [n, 1] + 1e-5)\n\
             let f n (x, w, b) = mean (tanh (norm n (x @ w) + b) * x) + sum (b * b) + sum (sum_axis (w * w) 0)\n\
             let j6 = jit (value_and_grad (f 6))\n\
             let j600 = jit (value_and_grad (f 600))\n\
             let show_all (l, (gx, gw, gb)) = (println (show l); println (show (to_list gx)); println (show (to_list gw)); println (show (to_list gb)))\n\
             let small = (cast (randn 1 [6, 5]), cast (randn 2 [5, 5]), cast (randn 3 [5]))\n\
             let big = (cast (randn 4 [600, 300]), cast (randn 5 [300, 300]), cast (randn 6 [300]))\n\
             let () = show_all (value_and_grad (f 6) small)\n\
             let () = show_all (j6 small)\n\
             let () = show_all (value_and_grad (f 600) big)\n\
             let () = show_all (j600 big)\n"
        );
        let r = run_with(&[], &src, &[("DP_DUMP_IR", "1")]);
        assert!(r.ok, "dp failed:\n{}", r.stderr);
        let out: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(out.len(), 16, "{dtype}: {}", r.stdout);
        for k in 0..4 {
            assert!(out[k] == out[k + 4], "{dtype}: small, line {k} unstaged and staged differ");
            assert!(out[k + 8] == out[k + 12], "{dtype}: big, line {k} unstaged and staged differ");
        }
        let ir: Vec<&str> = r.stderr.lines().filter(|l| l.trim_start().starts_with('%')).collect();
        for want in ["into `mean_axis`", "into `sum`", "into `mean`", "into `sum_axis`", "into SumTo("] {
            assert!(ir.iter().any(|l| l.contains("= chain[") && l.contains(want)), "{dtype}: {want} in {ir:#?}");
        }
    }
}

/// Batched products of a stack's transpose (attention's `q @ kᵀ`, and the reverse rule of a
/// batched `@`) read the transposed operand through strides, one stacked GEMM call each, with
/// the machine's numbers to the last bit in float32 and float64.
#[test]
fn batched_products_read_transposes_in_place_with_the_machines_numbers() {
    for dtype in ["float32", "float64"] {
        let src = format!(
            "let cast t = astype \"{dtype}\" t\n\
             let f (q, k) = sum (tanh (q @ einsum \"bij->bji\" [k]) @ k)\n\
             let j = jit (value_and_grad f)\n\
             let args = (cast (randn 1 [3, 5, 4]), cast (randn 2 [3, 6, 4]))\n\
             let show_all (l, (gq, gk)) = (println (show l); println (show (to_list gq)); println (show (to_list gk)))\n\
             let () = show_all (value_and_grad f args)\n\
             let () = show_all (j args)\n"
        );
        let r = run_with(&[], &src, &[("DP_DUMP_IR", "1")]);
        assert!(r.ok, "dp failed:\n{}", r.stderr);
        let out: Vec<&str> = r.stdout.lines().collect();
        assert!(out.len() == 6 && out[..3] == out[3..], "{dtype}: {}", r.stdout);
        let ir: Vec<&str> = r.stderr.lines().filter(|l| l.trim_start().starts_with('%')).collect();
        // q @ kᵀ reads k (input 1) itself; the reverse pass's products read their transposed
        // operands in place too (gemm_tn).
        assert!(ir.iter().any(|l| l.contains("= gemm_nt %0 %1 :")), "{dtype}: {ir:#?}");
        assert!(ir.iter().any(|l| l.contains("= gemm_tn ")), "{dtype}: {ir:#?}");
    }
}

/// A reshape of a single element read by a chain is read through (a row sum kept as [1], as
/// the formula of a softmax's reverse rule has it), so the staged program has no reshape node
/// left there; the gradient is the machine's.
#[test]
fn chains_read_through_reshapes_of_one_element() {
    let src = "let f y = sum (exp y * reshape (sum_axis (sin y) 0) [1])\n\
               let args = randn 1 [7]\n\
               let () = println (show (to_list (grad f args)))\n\
               let () = println (show (to_list (jit (grad f) args)))\n";
    let r = run_with(&[], src, &[("DP_DUMP_IR", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    let out: Vec<&str> = r.stdout.lines().collect();
    assert!(out.len() == 2 && out[0] == out[1], "{}", r.stdout);
    assert!(r.stderr.contains("chain[") && !r.stderr.contains("reshape"), "{}", r.stderr);
}

/// A permutation of a permutation is staged as one (`abcd->acbd` then `acbd->abcd` cancel, and
/// two different ones compose), with the unstaged values and gradient.
#[test]
fn permutations_of_permutations_fold() {
    let f = "let f x = let y = einsum \"abcd->acbd\" [x] in sum (sin (einsum \"acbd->abcd\" [y]) * x) + sum (einsum \"acbd->dcab\" [y] * 2.0)\n\
             let args = randn 1 [2, 3, 4, 5]\n";
    let forward = format!("{f}let () = println (show (f args))\nlet () = println (show (jit f args))\n");
    let r = run_with(&[], &forward, &[("DP_DUMP_IR", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    let out: Vec<&str> = r.stdout.lines().collect();
    assert!(out.len() == 2 && out[0] == out[1], "{}", r.stdout);
    // y is read only through the two compositions: x itself, and one permutation of x.
    let permutes: Vec<&str> = r.stderr.lines().filter(|l| l.contains("Permute")).collect();
    assert!(permutes.len() == 1 && permutes[0].contains("Permute([3, 2, 0, 1])"), "{}", r.stderr);
    let gradient = format!(
        "{f}let () = println (show (to_list (reshape (grad f args) [120])))\n\
         let () = println (show (to_list (reshape (jit (grad f) args) [120])))\n"
    );
    let out = run_ok(&gradient);
    assert!(out.len() == 2 && out[0] == out[1], "{out:?}");
}

/// The optimiser's identities are exact: `x - (-0)` is not `x` (for x = -0 it is +0, so
/// 1 / it is +infinity, staged as unstaged), and a tensor of ones throughout (the seed a traced
/// `grad` gives `sum`'s adjoint) is dropped from `ones * x` as the Float 1.0 is.
#[test]
fn identities_hold_bit_for_bit_and_see_through_tensors_of_ones() {
    let src = "let nz = 0.0 * (-1.0)\n\
               let f x = 1.0 / (x - nz)\n\
               let g (t : Tensor) = tensor 1.0 / (t - tensor nz)\n\
               let d = grad (fun x -> sum (tanh x))\n\
               let () = println (show (f (-0.0)))\n\
               let () = println (show (jit f (-0.0)))\n\
               let () = println (show (to_list (g (tensor [-0.0, 2.0]))))\n\
               let () = println (show (to_list (jit g (tensor [-0.0, 2.0]))))\n\
               let () = println (show (to_list (d (tensor [0.5, -1.0]))))\n\
               let () = println (show (to_list (jit d (tensor [0.5, -1.0]))))\n";
    let r = run_with(&[], src, &[("DP_DUMP_IR", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    let out: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(out.len(), 6, "{}", r.stdout);
    assert_eq!((out[0], out[1]), ("infinity", "infinity"));
    assert_eq!((out[2], out[3]), ("[infinity, 0.5]", "[infinity, 0.5]"));
    assert_eq!(out[4], out[5]);
    let grad_ir = r.stderr.split("jit #3").nth(1).unwrap_or_default();
    assert!(grad_ir.contains("tanh") && !grad_ir.contains("const <tensor>"), "{grad_ir}");
}

/// Runs `src` (which defines `f` and `j = jit (value_and_grad f)`) on two arguments, each
/// through `value_and_grad f` and through `j`, with the IR dumped: the staged lines equal the
/// unstaged ones to the last digit. Returns the IR's instruction lines.
fn staged_equals_unstaged_ir(dtype: &str, src: &str, a: &str, b: &str) -> Vec<String> {
    let src = format!(
        "{src}let () = println (value_and_grad f {a})\n\
         let () = println (j {a})\n\
         let () = println (value_and_grad f {b})\n\
         let () = println (j {b})\n"
    );
    let r = run_with(&[], &src, &[("DP_DUMP_IR", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    let out: Vec<&str> = r.stdout.lines().collect();
    assert!(out.len() == 4 && out[0] == out[1] && out[2] == out[3], "{dtype}: {out:#?}");
    r.stderr.lines().filter(|l| l.trim_start().starts_with('%')).map(str::to_string).collect()
}

/// Pairs of lines, a staged run's and the unstaged run's of the same derivative: their numbers
/// agree to `rel` relative to each line's largest.
fn pairs_agree(out: &[String], rel: f64) {
    assert!(out.len().is_multiple_of(2), "{out:#?}");
    for pair in out.chunks(2) {
        let (staged, plain) = (numbers(&pair[0]), numbers(&pair[1]));
        assert_eq!(staged.len(), plain.len(), "{pair:#?}");
        let scale = plain.iter().fold(1e-30f64, |s, x| s.max(x.abs()));
        for (a, b) in staged.iter().zip(&plain) {
            assert!((a - b).abs() <= rel * scale, "staged {} vs unstaged {}", pair[0], pair[1]);
        }
    }
}

/// The second word of each `jit:` line (trace, hit, inline).
fn kinds(log: &[String]) -> Vec<&str> {
    log.iter().map(|l| l.split_whitespace().nth(1).unwrap_or("")).collect()
}

// A staged function called by a function an outer `grad` differentiates runs staged, as one
// primitive of that `grad` (src/stage/vjp.rs). A single call's gradient is the unstaged one to
// the last bit (the same operations in the same order); over several calls a parameter's
// adjoint sums each call's contributions first and then adds them into the outer cell, where
// the unstaged pass adds each operation's contribution into the cell in turn: the same terms,
// associated differently, so those agree to rounding (1e-12 for Floats, 1e-5 for float32).

#[test]
fn grad_of_several_staged_calls_of_scalars_runs_the_compiled_vjp() {
    let src = "let f (a, b) = a * sin b + b * b / (1.0 + a * a)\n\
               let j = jit f\n\
               let loss g (a, b) = g (a, b) + g (b, a) * g (a * 2.0, b - 0.5)\n\
               let () = println (value_and_grad (loss j) (0.7, 1.3))\n\
               let () = println (value_and_grad (loss f) (0.7, 1.3))\n\
               let () = println (value_and_grad (loss j) (-0.4, 2.1))\n\
               let () = println (value_and_grad (loss f) (-0.4, 2.1))\n\
               let () = println (grad j (0.7, 1.3))\n\
               let () = println (grad f (0.7, 1.3))\n";
    let (out, log) = jit_log(src);
    pairs_agree(&out, 1e-12);
    assert_eq!(out[4], out[5], "one call: bit for bit");
    assert_eq!(kinds(&log), ["trace", "hit", "hit", "hit", "hit", "hit", "hit"], "{log:#?}");
    assert!(log[0].starts_with("jit: trace #1 (Float, Float) under grad of leaves 1, 2 of 2 in"), "{}", log[0]);
    assert!(log[1] == "jit: hit #1 (Float, Float) under grad of leaves 1, 2 of 2", "{}", log[1]);
}

#[test]
fn grad_of_staged_tensor_calls_with_passed_and_captured_values() {
    // `w` is captured (a constant of the program); `p` is passed and differentiated; `x0` is
    // a constant argument, and the second call's `x` a differentiated one: another program
    // (which leaves are differentiated is part of the signature). The Int is returned as is.
    let src = "let w = tensor [[0.5, -0.2, 0.1], [0.3, 0.8, -0.6]]\n\
               let cell (p, x, n) =\n\
               \x20 let h = tanh (p.a @ x + w @ x * float n + p.b) in (h, sum (h * h), n)\n\
               let j = jit cell\n\
               let loss c p =\n\
               \x20 let (h1, s1, _) = c (p, tensor [0.2, -0.4, 0.9], 2) in\n\
               \x20 let (h2, s2, k) = c (p, concat 0 [h1, tensor [0.5]], 2) in\n\
               \x20 s1 + s2 * float k + sum (h2 * tensor [1.0, -3.0])\n\
               let p = { a = tensor [[0.1, 0.2, -0.3], [0.4, -0.5, 0.6]], b = tensor [0.05, -0.1] }\n\
               let q = { a = tensor [[0.7, -0.2, 0.3], [0.1, 0.5, -0.6]], b = tensor [-0.3, 0.2] }\n\
               let () = println (value_and_grad (loss j) p)\n\
               let () = println (value_and_grad (loss cell) p)\n\
               let () = println (value_and_grad (loss j) q)\n\
               let () = println (value_and_grad (loss cell) q)\n\
               let () = println (grad (fun p -> match j (p, tensor [1.0, 2.0, 3.0], 1) with | (h, _, _) -> sum h) q)\n\
               let () = println (grad (fun p -> match cell (p, tensor [1.0, 2.0, 3.0], 1) with | (h, _, _) -> sum h) q)\n";
    let (out, log) = jit_log(src);
    pairs_agree(&out, 1e-5);
    assert_eq!(out[4], out[5], "one call: bit for bit");
    assert_eq!(kinds(&log), ["trace", "trace", "hit", "hit", "trace"], "{log:#?}");
}

#[test]
fn grad_of_a_recursion_over_a_tree_of_staged_cells() {
    let src = "type Tree = Leaf Float | Node Tree Tree\n\
               let leaf (p, x) = tanh (p.v * x + p.c)\n\
               let node (p, l, r) = tanh (p.w @ l + p.u @ r + p.c)\n\
               let (jl, jn) = (jit leaf, jit node)\n\
               let rec go lf nd p t =\n\
               \x20 match t with\n\
               \x20 | Leaf x -> lf (p, x)\n\
               \x20 | Node a b -> nd (p, go lf nd p a, go lf nd p b)\n\
               let t = Node (Node (Leaf 0.3) (Leaf (-1.2))) (Node (Leaf 0.8) (Node (Leaf 2.0) (Leaf (-0.1))))\n\
               let loss lf nd p = sum (go lf nd p t * tensor [1.0, -2.0])\n\
               let p = { v = tensor [0.5, -1.0], c = tensor [0.1, 0.2], w = tensor [[0.3, -0.4], [0.2, 0.9]],\n\
               \x20         u = tensor [[-0.5, 0.1], [0.7, 0.2]] }\n\
               let () = println (value_and_grad (loss jl jn) p)\n\
               let () = println (value_and_grad (loss leaf node) p)\n";
    let (out, log) = jit_log(src);
    pairs_agree(&out, 1e-5);
    // Each cell traced once (its first call), then hits: 5 leaves, 4 nodes.
    assert_eq!(kinds(&log).iter().filter(|k| **k == "trace").count(), 2, "{log:#?}");
    assert_eq!(kinds(&log).iter().filter(|k| **k == "hit").count(), 7, "{log:#?}");
}

#[test]
fn custom_rules_and_stop_gradient_inside_a_differentiated_staged_call_keep_their_meaning() {
    let src = "let sq = custom_vjp (fun x -> x * x) (fun x y ybar -> ybar * 10.0)\n\
               let f (a, b) = sq a * b + stop_gradient (a * b) * a + checkpoint (fun t -> sin t * t) b\n\
               let j = jit f\n\
               let loss g (a, b) = g (a, b) * g (b, a)\n\
               let () = println (value_and_grad (loss j) (0.7, 1.3))\n\
               let () = println (value_and_grad (loss f) (0.7, 1.3))\n\
               let () = println (grad j (0.7, 1.3))\n\
               let () = println (grad f (0.7, 1.3))\n\
               let () = println (grad (jit (fun (a, b) -> grad (fun t -> t * t * a) b)) (0.7, 1.3))\n\
               let () = println (grad (fun (a, b) -> grad (fun t -> t * t * a) b) (0.7, 1.3))\n";
    let (out, log) = jit_log(src);
    pairs_agree(&out, 1e-12);
    assert_eq!(out[2], out[3], "one call: bit for bit");
    assert_eq!(out[4], out[5], "one call: bit for bit");
    assert_eq!(kinds(&log), ["trace", "hit", "hit", "trace"], "{log:#?}");
}

/// `jit (vmap …)` where an operand of the batched function is a traced value the `vmap` does
/// not batch (parameters passed beside the batch): it broadcasts as one example's tensor,
/// whatever the batch size, in products, per-example gradients and the loss's gradient.
#[test]
fn vmap_inside_jit_broadcasts_traced_unbatched_operands() {
    let src = "let xs = tensor [[1.0, 2.0], [-1.0, 0.5]]\n\
               let loss w = sum (vmap (fun x -> sum (w * x)) xs)\n\
               let w = tensor [[0.5, -1.0], [0.1, 0.2]]\n\
               let () = println (loss w)\n\
               let () = println (jit loss w)\n\
               let () = println (grad loss w)\n\
               let () = println (jit (grad loss) w)\n\
               let () = println (grad (jit loss) w)\n\
               let w3 = tensor [[0.5, -1.0, 2.0], [0.1, 0.2, 0.3]]\n\
               let x3 = tensor [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0], [2.0, 2.0, 2.0]]\n\
               let f (w, xs) = vmap (fun x -> w @ x) xs\n\
               let () = println (f (w3, x3))\n\
               let () = println (jit f (w3, x3))\n\
               let h (w, xs) = vmap (fun x -> x @ transpose w + sum_axis w 1 * 0.5 + 1.0) xs\n\
               let () = println (h (w3, x3))\n\
               let () = println (jit h (w3, x3))\n\
               let pex (p, xs) = vmap (fun x -> grad (fun p -> sum (p * x)) p) xs\n\
               let xs2 = tensor [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]\n\
               let () = println (pex (w3, xs2))\n\
               let () = println (jit pex (w3, xs2))\n\
               let () = println (vmap (fun x -> astype \"float64\" w * x) xs)\n\
               let () = println (jit (fun w -> vmap (fun x -> w * x) xs) (astype \"float64\" w))\n";
    let lines = run_ok(src);
    let out = lines.join("\n");
    assert_eq!(lines.len(), 13, "{out}");
    assert_eq!(lines[0], "-2.0");
    for (i, j) in [(0, 1), (2, 3), (2, 4), (5, 6), (7, 8), (9, 10), (11, 12)] {
        assert_eq!(lines[i], lines[j], "line {j} (staged) differs from line {i}:\n{out}");
    }
    assert_eq!(lines[2], "tensor [[0.0, 2.5], [0.0, 2.5]]");
}

/// Under `jit (vmap …)` a comparison with a batched operand is a batch of Bools, which
/// stages (a traced Float against a batch: `max_of`, `min_of`, `where`); what the batching
/// rules compute on a stack's numbers (`floor`, Int `/`) is refused as staging's, by name.
#[test]
fn vmap_inside_jit_stages_batched_comparisons_and_names_what_it_cannot() {
    let src = "let xs = tensor [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]\n\
               let f s = vmap (fun x -> max_of s (sum x)) xs\n\
               let g s = vmap (fun x -> min_of (sum x) s) xs\n\
               let () = println (f 0.7, jit f 0.7, g 0.7, jit g 0.7)\n\
               let () = println (f 5.0, jit f 5.0)\n\
               let () = println (grad (fun s -> sum (f s)) 0.7, jit (grad (fun s -> sum (f s))) 0.7)\n\
               let c v = vmap (fun x -> where (greater x v) x v) xs\n\
               let () = println (c (tensor [1.0, 2.0, 3.0]), jit c (tensor [1.0, 2.0, 3.0]))\n\
               let fl xs = vmap (fun x -> floor (sum x)) xs\n\
               let dv xs = vmap (fun x -> float (argmax x / 2)) xs\n\
               let () = println (fl xs, dv xs)\n\
               let () = println (catch (fun () -> show (jit fl xs)) (fun m -> m))\n\
               let () = println (catch (fun () -> show (jit dv xs)) (fun m -> m))\n";
    let out = run_ok(src);
    assert_eq!(
        out,
        [
            "(tensor [6.0, 0.7], tensor [6.0, 0.7], tensor [0.7, -0.5], tensor [0.7, -0.5])",
            "(tensor [6.0, 5.0], tensor [6.0, 5.0])",
            "(1.0, 1.0)",
            "(tensor [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], tensor [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])",
            "(tensor [6.0, -1.0], tensor [1.0, 0.0])",
            "jit: cannot stage `floor` of a batch on a traced value",
            "jit: cannot stage `/` of a batch on a traced value",
        ]
    );
}

#[test]
fn nested_forward_and_batched_calls_and_captured_perturbed_values_run_unstaged() {
    let src = "let f x = x * x * sin x\n\
               let j = jit f\n\
               let () = println (grad (grad j) 0.7)\n\
               let () = println (grad (grad f) 0.7)\n\
               let () = println (jvp j 0.7 1.0)\n\
               let () = println (jvp f 0.7 1.0)\n\
               let g t = sum (t * t * sin t)\n\
               let k = jit g\n\
               let m = tensor [[0.1, 0.2], [0.3, 0.4]]\n\
               let () = println (vmap k m)\n\
               let () = println (vmap g m)\n\
               let () = println (grad (fun x -> sum (vmap k (x * m))) 0.3)\n\
               let () = println (grad (fun x -> sum (vmap g (x * m))) 0.3)\n\
               let () = println (grad (fun p -> let c = jit (fun h -> p * h) in c (p * 2.0) * c (p + 1.0)) 1.5)\n\
               let () = println (grad (fun p -> let c = (fun h -> p * h) in c (p * 2.0) * c (p + 1.0)) 1.5)\n\
               let () = println (grad (fun x -> jit (fun y -> y * x) 2.0) 3.0)\n\
               let () = println (grad (fun x -> (fun y -> y * x) 2.0) 3.0)\n\
               let () = println (vmap (fun x -> jit (fun y -> y * x) (tensor [2.0, 1.0])) m)\n\
               let () = println (vmap (fun x -> (fun y -> y * x) (tensor [2.0, 1.0])) m)\n";
    let (out, log) = jit_log(src);
    assert_eq!(out.len(), 14);
    for pair in out.chunks(2) {
        assert_eq!(pair[0], pair[1], "unstaged: the same numbers");
    }
    assert!(log.iter().all(|l| l.starts_with("jit: inline")), "{log:#?}");
    let captures = "inline (the staged function captures a value a `grad`, `jvp` or `vmap` outside the jit perturbs)";
    assert_eq!(log.iter().filter(|l| l.ends_with(captures)).count(), 4, "{log:#?}");
}

#[test]
fn the_profile_shows_where_a_staged_programs_time_goes() {
    // Three calls of one signature: one program, profiled over its three runs, printed when
    // the run ends; the costliest steps are named by their operations and kinds.
    let src = "let f x = sum (tanh (x @ x) * 2.0 + x)\n\
               let j = jit f\n\
               let x = ones [64, 64]\n\
               let () = println (j x + j x + j x)\n";
    let r = run_with(&[], src, &[("DP_JIT_PROFILE", "1")]);
    assert!(r.ok, "dp failed:\n{}", r.stderr);
    assert_eq!(r.stdout.trim(), run_with(&[], src, &[]).stdout.trim());
    let profile: Vec<&str> = r.stderr.lines().skip_while(|l| !l.starts_with("jit profile: ")).collect();
    assert!(profile.first().is_some_and(|l| l.contains(", 3 calls, ")), "{}", r.stderr);
    assert!(profile.iter().any(|l| l.contains("by operation")), "{}", r.stderr);
    assert!(profile.iter().any(|l| l.contains("gemm_nn") && l.contains("float32 [64, 64]")), "{}", r.stderr);
    assert!(profile.iter().any(|l| l.contains("chain[")), "{}", r.stderr);
    // Without the variable, nothing is printed.
    assert!(!run_with(&[], src, &[]).stderr.contains("jit profile"));
}

/// A random elementwise expression of shape [r, c] over `x` ([r, c]), `w` ([c], a bias) and
/// `s` ([r, 1], a per-row value), with reductions inside it (per-row means, column sums, a
/// whole sum scaling it): the shapes the staged chains, broadcasts and reduced chains take.
fn tensor_expression(rng: &mut crate::gen::rng::Rng, depth: u32, rows: usize) -> String {
    if depth == 0 || rng.chance(0.15) {
        return rng.pick(&["x", "(x * x)", "(x + w)", "(x * s)", "(x - s + w)"]).to_string();
    }
    let mut sub = || tensor_expression(rng, depth - 1, rows);
    let (a, b) = (sub(), sub());
    match rng.below(22) {
        0 => format!("({a} + {b})"),
        1 => format!("({a} - {b})"),
        2 => format!("({a} * {b})"),
        3 => format!("({a} / ({b} * {b} + 1.0))"),
        4 => format!("(tanh {a})"),
        5 => format!("(sigmoid {a})"),
        6 => format!("(sin {a})"),
        7 => format!("(cos {a})"),
        8 => format!("(exp (tanh {a}))"),
        9 => format!("(relu {a})"),
        10 => format!("(abs {a})"),
        11 => format!("(sqrt ({a} * {a} + 1.0))"),
        12 => format!("(log ({a} * {a} + 1.0))"),
        13 => format!("(-{a})"),
        14 => format!("(max_of {a} {b})"),
        15 => format!("(min_of {a} {b})"),
        16 => format!("(where (greater {a} {b}) {a} ({b} * 0.5))"),
        17 => format!("(clip (-0.5) 0.5 {a})"),
        18 => format!("({a} ** 2.0)"),
        19 => format!("({a} - reshape (mean_axis {a} 1) [{rows}, 1])"),
        20 => format!("({b} + sum_axis ({a} * {a}) 0 * 0.01)"),
        _ => format!("({a} * (sum {b} * 0.001))"),
    }
}

/// Generated programs: random elementwise expressions with broadcasts and reductions (see
/// `tensor_expression`), each reduced to a loss three ways (`sum`, `mean`, a weighted column
/// sum), differentiated with respect to all three arguments; `jit (value_and_grad f)` (traced
/// at another point first) prints the machine's numbers to the last digit, in float32 and
/// float64, on tensors large enough for the thread pool. The seed is in the failure message.
#[test]
fn generated_tensor_programs_staged_are_the_machines_to_the_bit() {
    // DP_TEST_SEED=n tries other programs.
    let seed = std::env::var("DP_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed17);
    let mut rng = crate::gen::rng::Rng::new(seed);
    let (rows, cols) = (96, 130);
    let mut bodies = Vec::new();
    for k in 0..24 {
        let e = tensor_expression(&mut rng, 4, rows);
        bodies.push(match k % 3 {
            0 => format!("sum ({e})"),
            1 => format!("mean ({e})"),
            _ => format!("sum (sum_axis ({e}) 0 * w)"),
        });
    }
    for dtype in ["float32", "float64"] {
        let mut src = format!(
            "let cast t = astype \"{dtype}\" t\n\
             let at k = (cast (randn k [{rows}, {cols}]), cast (randn (k + 1) [{cols}]), cast (randn (k + 2) [{rows}, 1]))\n\
             let show (l, (gx, gw, gs)) = println (show l ++ \" \" ++ show (to_list gx) ++ \" \" ++ show (to_list gw) ++ \" \" ++ show (to_list gs))\n"
        );
        for (i, body) in bodies.iter().enumerate() {
            src.push_str(&format!(
                "let f{i} (x, w, s) = {body}\n\
                 let j{i} = jit (value_and_grad f{i})\n\
                 let _ = j{i} (at 7)\n\
                 let () = show (value_and_grad f{i} (at 1))\n\
                 let () = show (j{i} (at 1))\n"
            ));
        }
        let r = run_with(&[], &src, &[]);
        assert!(r.ok, "seed {seed:#x}, {dtype}: dp failed:\n{}", r.stderr);
        let out: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(out.len(), 2 * bodies.len(), "seed {seed:#x}, {dtype}");
        for (i, pair) in out.chunks(2).enumerate() {
            assert!(
                pair[0] == pair[1],
                "seed {seed:#x}, {dtype}: program {i} `{}`: staged differs from unstaged",
                bodies[i]
            );
        }
    }
}

/// `normalize` (layer norm's core) under every handler: staged forward and gradient are the
/// machine's to the last digit (the one-pass adjoint in both), `vmap` over rows is the
/// operation on the matrix, a batch of gradients is the stack of gradients, and the second
/// derivative (through the differentiable form of its rule) is the one-pass gradient's
/// directional derivative by finite differences in float64.
#[test]
fn normalize_under_every_handler() {
    let src = "let x = astype \"float64\" (randn 1 [6, 9])\n\
               let w = astype \"float64\" (randn 2 [6, 9])\n\
               let f a = sum (normalize 1e-5 a * w)\n\
               let () = println (show (to_list (grad f x)))\n\
               let () = println (show (to_list (jit (grad f) x)))\n\
               let () = println (show (to_list (normalize 1e-5 x)))\n\
               let () = println (show (to_list (vmap (fun r -> normalize 1e-5 r) x)))\n\
               let () = println (show (to_list (vmap (fun (a, b) -> grad (fun r -> sum (normalize 0.5 r * b)) a) (x, w))))\n\
               let () = println (show (to_list (stack 0 (map (fun i -> grad (fun r -> sum (normalize 0.5 r * row w i)) (row x i)) (range 0 6)))))\n\
               let v = astype \"float64\" (randn 3 [6, 9])\n\
               let h a = sum (grad f a * v)\n\
               let d = sum (grad h x * v)\n\
               let e = 1e-5\n\
               let fd = (h (x + v * e) - h (x - v * e)) / (2.0 * e)\n\
               let () = println (abs (d - fd) < 1e-6 * (abs fd + 1.0))\n";
    let out = run_ok(src);
    assert_eq!(out.len(), 7, "{out:#?}");
    assert_eq!(out[0], out[1], "staged gradient");
    assert_eq!(numbers(&out[2]).len(), 54);
    let (a, b) = (numbers(&out[2]), numbers(&out[3]));
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-12), "vmap over rows");
    let (a, b) = (numbers(&out[4]), numbers(&out[5]));
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-12), "a batch of gradients");
    assert_eq!(out[6], "true", "second derivative against finite differences");
}

#[test]
fn the_log_names_the_leaves_an_outer_grad_differentiates() {
    // One signature, three traces: they differ only in which leaves the grad differentiates.
    let src = "let cellj = jit (fun (w, h) -> w * h + sin h)\n\
               let () = println (grad (fun w -> cellj (w, 0.4)) 0.7)\n\
               let () = println (grad (fun h -> cellj (0.7, h)) 0.4)\n\
               let () = println (grad (fun w -> cellj (w, w)) 0.7)\n";
    let (_, log) = jit_log(src);
    let heads: Vec<&str> = log.iter().map(|l| l.split(" in ").next().unwrap_or("")).collect();
    assert_eq!(
        heads,
        [
            "jit: trace #1 (Float, Float) under grad of leaf 1 of 2",
            "jit: trace #1 (Float, Float) under grad of leaf 2 of 2",
            "jit: trace #1 (Float, Float) under grad of leaves 1, 2 of 2"
        ],
        "{log:#?}"
    );
}
