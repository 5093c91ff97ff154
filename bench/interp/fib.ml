(* Naive doubly recursive Fibonacci: fib 30 = 832040 (1,664,079 calls). *)
let rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)

let () = print_int (fib 30); print_newline ()
