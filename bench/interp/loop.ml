(* A 10-million-iteration tail-recursive loop: prints 50000005000000 (OCaml's 63-bit int holds it). *)
let rec loop i acc = if i = 0 then acc else loop (i - 1) (acc + i)

let () = print_int (loop 10000000 0); print_newline ()
