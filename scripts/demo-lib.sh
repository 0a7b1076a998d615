# Sourced by scripts/demo.sh (and by its test): how the demo starts what runs in
# the background, stops all of it on every exit path (success, a failed check,
# Ctrl-C), and checks each claim it prints.
#
# Every process the demo starts carries TDL_DEMO_RUN=<this run's work dir> in its
# environment: inherited through nsenter, a shell function's subshell and
# anything a process forks or execs, it finds them however they were started (a
# PID or a process group would miss an agent whose subshell was killed instead).
# /proc/PID/environ is the environment a process was exec'd with, so the demo's
# own shell and its forks (which were not exec'd with the mark) never match.

# demo_init WORKDIR: marks this run; cleanup (demo_exit) runs on every exit.
demo_init() {
  DEMO_RUN=$1
  DEMO_JOBS=()
  export TDL_DEMO_RUN="$DEMO_RUN"
  trap demo_exit EXIT
  # A signal ends the script through exit, so the EXIT trap (the cleanup) runs.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  # A command that fails outside a check (set -e ends the demo) says which.
  trap 'demo_fail "line $LINENO: \`$BASH_COMMAND\` exited $?"' ERR
}

# demo_pids [JOB]: the live processes of this run (only JOB's, when given).
demo_pids() {
  local f pid
  # grep without the mark, or it would find itself.
  for f in $(env -u TDL_DEMO_RUN grep -lzxF "TDL_DEMO_RUN=$DEMO_RUN" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    if [ -n "${1:-}" ] && ! grep -qzxF "TDL_DEMO_JOB=$1" "$f" 2>/dev/null; then continue; fi
    echo "$pid"
  done
}

# demo_bg JOB CMD...: starts CMD (a program or a shell function) in the background
# as job JOB; DEMO_BG_PID is its subshell, for wait.
demo_bg() {
  local job=$1
  shift
  (
    export TDL_DEMO_JOB="$job"
    # A program replaces the subshell (no "Terminated" notice from it when the
    # program is stopped); a function runs in it.
    if declare -F "$1" >/dev/null; then "$@"; else exec "$@"; fi
  ) &
  DEMO_BG_PID=$!
  DEMO_JOBS+=("$job")
}

# demo_kill [JOB]: SIGTERM to every process of JOB (of the run, without JOB), then
# SIGKILL to what is left after 10 s; returns when none is left.
demo_kill() {
  local job=${1:-} pids _
  pids=$(demo_pids "$job")
  [ -z "$pids" ] && return 0
  # shellcheck disable=SC2086 # one PID a word
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 100); do
    pids=$(demo_pids "$job")
    [ -z "$pids" ] && return 0
    sleep 0.1
  done
  echo "demo: ${job:-leftover} processes did not stop on SIGTERM within 10 s; SIGKILL to $(echo $pids)" >&"${DEMO_ERR_FD:-2}"
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(demo_pids "$job")" ] && return 0; sleep 0.1; done
  echo "demo: processes of this run still alive after SIGKILL: $(demo_pids "$job" | tr '\n' ' ')" >&"${DEMO_ERR_FD:-2}"
  return 1
}

# The EXIT trap: stops the jobs newest first (an agent before the API server or
# etcd it stops against), then anything else of the run (an interrupted
# foreground command), then the caller's demo_cleanup_resources (namespaces,
# pins, directories). Keeps the exit status; a leftover process makes it 1.
demo_exit() {
  local rc=$? i
  trap '' INT TERM HUP
  trap - ERR
  set +e
  # The shell's own "Terminated" notices for the jobs it reaps are noise: its
  # stderr goes away, the cleanup's messages go to the saved one (fd 3).
  exec 3>&2 2>/dev/null
  DEMO_ERR_FD=3
  for ((i = ${#DEMO_JOBS[@]} - 1; i >= 0; i--)); do demo_kill "${DEMO_JOBS[i]}"; done
  demo_kill || rc=1
  wait 2>/dev/null
  if declare -F demo_cleanup_resources >/dev/null; then demo_cleanup_resources 2>&3 || rc=1; fi
  exit "$rc"
}

# Every claim the demo prints goes through these: "  ✓ CLAIM" when it holds;
# otherwise "demo: FAILED: CLAIM" and the demo exits 1 (the cleanup still runs).
# Never call them in a pipeline or $(...): exit would leave only that subshell.
demo_fail() {
  printf '\033[31mdemo: FAILED: %s\033[0m\n' "$*" >&2
  exit 1
}
demo_ok() { printf '  \033[32m✓\033[0m %s\n' "$*"; }

# check CLAIM CMD...: CMD succeeds.
check() {
  local claim=$1
  shift
  if "$@"; then demo_ok "$claim"; else demo_fail "$claim"; fi
}

# check_not CLAIM CMD...: CMD fails (a probe that must get no answer).
check_not() {
  local claim=$1
  shift
  if "$@"; then demo_fail "$claim"; else demo_ok "$claim"; fi
}

# check_output CLAIM REGEX CMD...: CMD succeeds and its output, printed, matches
# the extended REGEX.
check_output() {
  local claim=$1 re=$2 out
  shift 2
  if out=$("$@" 2>&1); then
    [ -n "$out" ] && printf '%s\n' "$out"
    if grep -qE -- "$re" <<<"$out"; then demo_ok "$claim"; return 0; fi
  else
    [ -n "$out" ] && printf '%s\n' "$out"
  fi
  demo_fail "$claim (expected output matching: $re)"
}

# check_within SECONDS CLAIM CMD...: CMD succeeds within SECONDS (tried every
# 0.2 s): for what the agent applies asynchronously (a watch event).
check_within() {
  local secs=$1 claim=$2 _
  shift 2
  for _ in $(seq $((secs * 5))); do
    if "$@"; then demo_ok "$claim"; return 0; fi
    sleep 0.2
  done
  demo_fail "$claim (not within ${secs} s)"
}
