#!/usr/bin/env bash
# Build .gpuhost/profiling: the extra wheels (CPython 3.12, manylinux x86_64) of
# results/profiling/gpuhost-requirements.txt, in one folder (about 30 MB) with offline-install.
# Run from the repository root on the VM; the existing bundles are not touched.
set -euo pipefail
tmp=$(mktemp -d)
BUNDLE_BYTES=64000000 ../shared/tools/offline-wheelhouse results/profiling/gpuhost-requirements.txt "$tmp" \
  ../shared/tools/gpuhost-has.txt
rm -rf .gpuhost/profiling
mv "$tmp/bundle1" .gpuhost/profiling
rm -rf "$tmp"
du -sh .gpuhost/profiling && ls .gpuhost/profiling
