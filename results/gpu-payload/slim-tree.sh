#!/usr/bin/env bash
# Make the working tree that a device call sends small, so 8 payload pieces travel a call instead of one:
# the committed result folders a GPU run does not read move to a folder outside the checkout, and come back
# (git has them all: `restore` takes back from git any tracked file still missing, and nothing else).
#   bash results/gpu-payload/slim-tree.sh aside      # before the calls: about 8.6 MB of tree left
#   bash results/gpu-payload/slim-tree.sh restore    # after them, before any commit
# Kept: results/cpu-general (set timing), results/gpu-grid (run.sh), results/gpu-payload. On 2026-11-25 the tree
# fell from 60.7 to 8.6 MB and the 60 pieces travelled in 8 calls (about one minute, against 14).
set -euo pipefail
aside=${SLIM_ASIDE:-/tmp/hase-results-aside}
keep=" cpu-general gpu-grid gpu-payload "
case "${1:-}" in
  aside)
    mkdir -p "$aside"
    for d in results/*/; do
      name=$(basename "$d")
      [[ $keep == *" $name "* ]] || mv "$d" "$aside/"
    done
    git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 ;;
  restore)
    [ -d "$aside" ] && for d in "$aside"/*/; do [ -e "results/$(basename "$d")" ] || mv "$d" results/; done
    # tracked files still missing come back from git; files changed in place are left as they are
    git ls-files -z -d results | xargs -0 -r git checkout --
    git status --short results | head ;;
  *) echo "usage: $0 aside|restore" >&2; exit 2 ;;
esac
