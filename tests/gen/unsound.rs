//! Programs a sound checker must reject, built on the soundness holes the checker had before
//! the "types you can trust" work (they ran, and reached `internal:` faults or printed values
//! of the wrong type). They are not well typed, so the check for them is the converse of the
//! others': dp must report a type error before running anything.
//!
//! - the value restriction through closures: `let log = ref []` and a closure pushing to it;
//! - declared types identified by name: two `type T`s, a user `Option`;
//! - shift/reset answer types checked shallowly when the shift is not lexically in its reset;
//! - answer constraints left out of a type scheme (a hole the subeffecting checker had
//!   while it was being written: `h`'s reset body runs `g`, which turns out to shift to a
//!   reset of another type than one use of `h` makes).

use super::rng::Rng;

pub fn program(rng: &mut Rng) -> String {
    let n = rng.range(1, 50);
    let s = *rng.pick(&["a", "dp", "hello"]);
    match rng.below(5) {
        0 => format!(
            "let log = ref []\nlet push x = log := x :: !log\nlet () = push {n}\nlet () = push \"{s}\"\n\
             let () = println (match !log with | x :: _ -> x + 1 | [] -> 0)\n"
        ),
        1 => format!(
            "type T = A Int\nlet f x = match x with | A n -> n + {n}\ntype T = A String\n\
             let () = println (f (A \"{s}\"))\n"
        ),
        2 => format!(
            "type Option a = Nothing | Just a\nlet () = println (option_default {n} (Just {n}) + 1)\n\
             let () = println (match Some \"{s}\" with | Nothing -> \"\" | Just t -> t)\n"
        ),
        3 => format!(
            "let f g =\n  let h x = reset (fun () -> g (); [x]) in\n  (h {n}, h \"{s}\")\n\
             let () = println (f (fun () -> shift (fun k -> [{n}])))\n"
        ),
        _ => format!(
            "let g () = shift (fun k -> [\"{s}\"])\nlet xs = reset (fun () -> [{n} + g ()])\n\
             let () = println (sum_int xs + 1)\n"
        ),
    }
}
