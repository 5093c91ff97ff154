#!/bin/sh
# Seeds the fuzz corpus with every golden test program and example.
# Usage: fuzz/seed.sh   (from anywhere)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/fuzz/corpus/pipeline"
mkdir -p "$dest"
n=0
for f in $(find "$root/tests/programs" -name '*.dp' | sort) "$root"/examples/*.dp; do
    [ -f "$f" ] || continue
    # Flatten the path into a unique name: tests/programs/basics/hello.dp -> basics__hello.dp
    rel=${f#"$root"/}
    rel=${rel#tests/programs/}
    cp "$f" "$dest/$(printf '%s' "$rel" | tr '/' '_')"
    n=$((n + 1))
done
echo "seeded $n files into $dest"
