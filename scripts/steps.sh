# Shared helper of scripts/test and .ci/run. Sourced, not run.
#
# step NAME COMMAND [ARG...] runs COMMAND and prints
#
#   == NAME                              when it starts,
#      ... NAME: still running (2m)      every minute while it runs,
#   == NAME: ok (1m05s; 3m10s in all)    or "== NAME: FAILED (12s; ...)" at its end,
#
# where "in all" is the time since the script started. It returns COMMAND's
# exit status. Bash ignores set -e inside a function whose status is tested:
# when COMMAND is a shell function, chain its commands with &&.

# steps_fmt SECONDS prints a duration as 45s or 3m05s.
steps_fmt() {
	if [ "$1" -ge 60 ]; then
		printf '%dm%02ds' $(($1 / 60)) $(($1 % 60))
	else
		printf '%ds' "$1"
	fi
}

# steps_heartbeat NAME prints a line every minute until it is killed or the
# script that started it has gone (after a Ctrl-C, say).
steps_heartbeat() {
	local ticks=0 s=
	trap '[ -n "$s" ] && kill "$s" 2>/dev/null; exit 0' TERM
	while kill -0 $$ 2>/dev/null; do
		sleep 5 &
		s=$!
		wait "$s" || true
		ticks=$((ticks + 1))
		if [ $((ticks % 12)) = 0 ]; then
			echo "   ... $1: still running ($((ticks / 12))m)"
		fi
	done
}

step() {
	local name=$1 t0=$SECONDS rc=0 hb
	shift
	echo "== $name"
	steps_heartbeat "$name" &
	hb=$!
	"$@" || rc=$?
	kill "$hb" 2>/dev/null || true
	wait "$hb" 2>/dev/null || true
	local took
	took="$(steps_fmt $((SECONDS - t0))); $(steps_fmt "$SECONDS") in all"
	if [ "$rc" = 0 ]; then
		echo "== $name: ok ($took)"
	else
		echo "== $name: FAILED, exit status $rc ($took)"
	fi
	return "$rc"
}
