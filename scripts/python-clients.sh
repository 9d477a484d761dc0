#!/usr/bin/env bash
# scripts/python-clients.sh: prints the directory of the Python clients the tests run
# (tests/integration/test_python_clients.py), preparing it on first use:
#
#   python3   Python with the official SDKs, Debian's python3-openai and python3-anthropic
#   llm       the `llm` chat client (Debian's llm), which speaks OpenAI's API
#
# PyPI is out of reach here and Debian 12 packages neither SDK, so they come from Debian
# sid, in a minimal chroot in build/python-clients/root run through wrappers beside it
# (scripts/debian-root.sh): no chroot(2), no root at run time. The first run needs root
# and Debian's mirror (about 70 s here); later runs only print the path. The versions
# installed are written to build/python-clients/ready.
set -euo pipefail
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/debian-root.sh
. "$root_dir/scripts/debian-root.sh"
DEBIAN_ROOT_WHO=python-clients

dir=$root_dir/build/python-clients
ready=$dir/ready
if [ -f "$ready" ]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"
# One provisioning at a time (two checkouts' tests).
exec 9>"$dir/lock"
flock 9
if [ -f "$ready" ]; then
  echo "$dir"
  exit 0
fi

started=$(date +%s)
debian_root_make "$dir" sid "" python3-openai python3-anthropic llm
debian_root_wrapper "$dir" usr/bin/python3 "$dir/python3"
debian_root_wrapper "$dir" usr/bin/python3 "$dir/llm" usr/bin/llm
versions=$("$dir/python3" -c 'import openai, anthropic, llm.cli, importlib.metadata as m
print("openai", openai.__version__, "anthropic", anthropic.__version__, "llm", m.version("llm"))') ||
  debian_root_die "the chroot's Python cannot import the clients"
echo "$versions" > "$ready"
debian_root_say "$versions ready in $(( $(date +%s) - started )) s"
echo "$dir"
