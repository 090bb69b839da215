# Sourced by the scripts: puts cargo and the fetched NVRTC on the search paths.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
nvrtc_lib=$(ls -d "$root"/.tools/nvrtc/nvidia/cu13/lib 2>/dev/null || true)
if [ -n "$nvrtc_lib" ]; then
  export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
