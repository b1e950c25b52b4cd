# Sourced by scripts/run.sh and .ci/run before they build: stops, saying
# what to install, unless cargo and a rustc at least the workspace's
# rust-version are there (Debian's own rustc is older: 1.63 in Debian 12).
need_rust() {
  local want have
  want=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)
  # rustup installs into ~/.cargo/bin, which a shell started before it
  # does not have on PATH yet.
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) export PATH="$HOME/.cargo/bin:$PATH" ;; esac
  fi
  if command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1; then
    have=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n' "$want" "$have" | sort -V | head -n 1)" = "$want" ]; then
      return 0
    fi
    have="found rustc $have"
  else
    have="found no cargo"
  fi
  cat >&2 <<MSG
novafs needs Rust $want or newer ($have; Debian's own rustc package is older).
Install Rust with rustup (as the user who builds), then run this again:
  apt-get install -y curl gcc
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
  . "\$HOME/.cargo/env"
MSG
  exit 1
}
