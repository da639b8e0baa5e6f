# Sourced by deps.sh and bench-deps.sh: apt_install WHAT PKG... installs the
# missing Debian packages PKG (none: nothing to do). Without root it only
# says what WHAT is missing.
apt_install() {
  local what=$1
  shift
  [ $# -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "predictio: $what missing: $* (run as root to install them)" >&2
    return 0
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
