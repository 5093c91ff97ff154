# Naive doubly recursive Fibonacci: fib(30) = 832040 (1,664,079 calls).


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


print(fib(30))
