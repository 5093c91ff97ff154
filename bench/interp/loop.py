# The 10-million-iteration loop of loop.dp. CPython has no tail calls, so the tail-recursive
# loop is written as the `while` loop it stands for (inside a function: locals are fast).
# Prints 50000005000000.


def loop(i, acc):
    while i != 0:
        acc += i
        i -= 1
    return acc


print(loop(10_000_000, 0))
