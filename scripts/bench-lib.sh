# Shared helpers of scripts/bench-targets and scripts/bench-alternate.
# Sourced, not run. Everything here only reads the outputs of `go test
# -bench` and of the scale program (internal/cmd/scale), whose markdown
# tables print Go durations ("850µs", "26.1ms", "1.2s").

# The go command: PATH first, then the usual install location.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=/usr/local/go/bin:$PATH
fi

bl_die() {
	echo "$(basename "$0"): $*" >&2
	exit 1
}

# bl_dur_awk is an awk function, dur_ms(s), that turns a Go duration string
# (time.Duration.String: "0s", "20µs", "4.73ms", "1.5s", "1m2.5s") into
# milliseconds; it returns -1 for anything else.
bl_dur_awk='
function dur_ms(s,   t, num, unit, mult) {
	gsub(/^[ \t]+|[ \t]+$/, "", s)
	if (s == "0" || s == "0s") return 0
	t = 0
	while (s != "") {
		if (!match(s, /^[0-9]+(\.[0-9]+)?/)) return -1
		num = substr(s, 1, RLENGTH) + 0
		s = substr(s, RLENGTH + 1)
		if (substr(s, 1, 2) == "ns") { mult = 1e-6; s = substr(s, 3) }
		else if (substr(s, 1, 2) == "us") { mult = 1e-3; s = substr(s, 3) }
		else if (substr(s, 1, 3) == "\302\265s") { mult = 1e-3; s = substr(s, 4) }  # µs, UTF-8 micro sign
		else if (substr(s, 1, 3) == "\316\274s") { mult = 1e-3; s = substr(s, 4) }  # μs, Greek mu
		else if (substr(s, 1, 2) == "ms") { mult = 1; s = substr(s, 3) }
		else if (substr(s, 1, 1) == "s") { mult = 1e3; s = substr(s, 2) }
		else if (substr(s, 1, 1) == "m") { mult = 6e4; s = substr(s, 2) }
		else if (substr(s, 1, 1) == "h") { mult = 3.6e6; s = substr(s, 2) }
		else return -1
		t += num * mult
	}
	return t
}
'

# bl_parse_lateness TAG < scale-output prints one tab-separated line per row
# of the scale program's lateness table:
#   TAG busy impl p50_ms p99_ms max_ms early recorded_ms cpu_us allocs
# impl is watchdog/memory, watchdog/discard, heap or afterfunc; recorded_ms
# is -1 for the naive rows (no store); cpu_us and allocs are the process's
# CPU time and allocations per fire, -1 with busy goroutines (their CPU is
# the process's too). Exits 1 if a duration does not parse.
bl_parse_lateness() {
	LC_ALL=C awk -v tag="$1" "$bl_dur_awk"'
	/^\| *(watchdog\/|heap|afterfunc)/ {
		n = split($0, f, "|")
		for (i = 1; i <= n; i++) gsub(/^[ \t]+|[ \t]+$/, "", f[i])
		rec = (f[8] == "-" || f[8] == "") ? -1 : dur_ms(f[8])
		p50 = dur_ms(f[4]); p99 = dur_ms(f[5]); mx = dur_ms(f[6])
		if (p50 < 0 || p99 < 0 || mx < 0 || (rec < 0 && f[8] != "-" && f[8] != "")) {
			print "unparsable lateness row: " $0 > "/dev/stderr"; bad = 1; next
		}
		cpu = -1; allocs = -1
		if (f[9] != "-" && f[9] != "") {
			split(f[9], c, ", ")
			cpu = dur_ms(c[1]) * 1000; allocs = c[2] + 0
			if (cpu < 0) { print "unparsable CPU per fire: " $0 > "/dev/stderr"; bad = 1; next }
		}
		printf "%s\t%s\t%s\t%.6g\t%.6g\t%.6g\t%s\t%.6g\t%.6g\t%.6g\n", tag, f[3], f[2], p50, p99, mx, f[7], rec, cpu, allocs
	}
	END { exit bad }'
}

# bl_bench_metric NAME UNIT < go-test-output prints the value of UNIT (ns/op,
# allocs/op, cancel-ms, ...) of every result line of benchmark NAME (the full
# name without the -GOMAXPROCS suffix, e.g. BenchmarkTouch).
bl_bench_metric() {
	awk -v name="$1" -v unit="$2" '
	{ n = $1; sub(/-[0-9]+$/, "", n) }
	n == name { for (i = 3; i < NF; i++) if ($(i + 1) == unit) print $i }'
}

# bl_stats < numbers prints "median min max count" ("NA NA NA 0" for none);
# the median of an even count is the mean of the two middle values.
bl_stats() {
	sort -g | awk '
	NF { a[++n] = $1 }
	END {
		if (n == 0) { print "NA NA NA 0"; exit }
		m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		printf "%.6g %.6g %.6g %d\n", m, a[1], a[n], n
	}'
}

# bl_ms V formats milliseconds with three significant digits.
bl_ms() {
	awk -v v="$1" 'BEGIN {
		if (v == "NA") { print "n/a"; exit }
		if (v < 1000) printf "%.3g ms\n", v; else printf "%.3g s\n", v / 1000
	}'
}

# bl_le A B: true when A <= B (numbers; false if either is NA).
bl_le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "NA" && b != "NA" && a + 0 <= b + 0) }'; }

# bl_div A B prints A/B with three significant digits (n/a on NA or B=0).
bl_div() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || b + 0 == 0) print "NA"; else printf "%.3g\n", a / b }'; }

# Disturbance meter. bl_load_mark before a piece, bl_load_report after it:
# it prints the CPU time other processes on the machine used meanwhile, in
# cores (the whole machine's busy time from /proc/stat minus this script's
# children's CPU time, from the `times` builtin), and the load average. A
# benchmark run beside `go test -race` shows up as a foreign load near 1 or
# 2 cores; an undisturbed one stays near 0.
bl_clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
bl_times_file=$(mktemp "${TMPDIR:-/tmp}/bench-times.XXXXXX")
bl_busy_s() { awk -v hz="$bl_clk_tck" '$1 == "cpu" { print ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat; }
# bl_children_s sets bl_child to the CPU time of this shell's finished
# children. `times` must run in this shell, not in a $(...) subshell (whose
# counters start at zero), hence the file.
bl_children_s() {
	times >"$bl_times_file"
	bl_child=$(awk 'NR == 2 {
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); t += p[1] * 60 + p[2] }
		print t
	}' "$bl_times_file")
}
bl_load_mark() {
	bl_m_busy=$(bl_busy_s)
	bl_children_s
	bl_m_child=$bl_child
	bl_m_wall=$(date +%s.%N)
}
# bl_load_report sets bl_load to "foreign_cores loadavg1" for the piece
# since the mark.
bl_load_report() {
	local busy wall
	busy=$(bl_busy_s)
	bl_children_s
	wall=$(date +%s.%N)
	bl_load=$(awk -v b0="$bl_m_busy" -v b1="$busy" -v c0="$bl_m_child" -v c1="$bl_child" \
		-v w0="$bl_m_wall" -v w1="$wall" -v la="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
		f = ((b1 - b0) - (c1 - c0)) / (w1 - w0); if (f < 0) f = 0
		printf "%.2f %s\n", f, la
	}')
}

# Quiet machine. Before each piece, bl_piece waits (at most
# $BENCH_QUIET_WAIT seconds, default 600; 0: no wait) until other processes
# use less than $BENCH_QUIET_CORES cores (default 0.2) over 3 s, and re-runs
# a piece during which they used that much, at most $BENCH_RETRIES times
# (default 2; the disturbed outputs are kept as NAME.disturbed-K.txt). A
# figure that stayed disturbed is flagged in the summary.
BENCH_QUIET_WAIT=${BENCH_QUIET_WAIT:-600}
BENCH_QUIET_CORES=${BENCH_QUIET_CORES:-0.2}
BENCH_RETRIES=${BENCH_RETRIES:-2}

bl_wait_quiet() {
	local deadline=$((SECONDS + BENCH_QUIET_WAIT)) b0 b1 f said=0
	while :; do
		b0=$(bl_busy_s)
		sleep 3
		b1=$(bl_busy_s)
		f=$(awk -v a="$b0" -v b="$b1" 'BEGIN { printf "%.2f\n", (b - a) / 3 }')
		bl_le "$BENCH_QUIET_CORES" "$f" || return 0
		if [ $SECONDS -ge $deadline ]; then
			echo "[$(date -u +%H:%M:%S)] machine still busy ($f cores used by other processes): measuring anyway" >&2
			return 0
		fi
		if [ $said = 0 ] || [ $((SECONDS % 60)) -lt 3 ]; then
			echo "[$(date -u +%H:%M:%S)] waiting for a quiet machine: other processes use $f cores" >&2
			said=1
		fi
	done
}

# bl_piece NAME DIR CMD... runs CMD in DIR with its output in $out/NAME.txt,
# after waiting for a quiet machine, re-running it if it was disturbed; it
# appends the command to $out/commands.txt and "NAME foreign_cores
# loadavg attempts" to $out/load.tsv, and sets bl_load.
bl_piece() {
	local name=$1 dir=$2 try=0
	shift 2
	printf '(cd %q && %s)\n' "$dir" "$(printf '%q ' "$@")" >>"$out/commands.txt"
	while :; do
		try=$((try + 1))
		[ "$BENCH_QUIET_WAIT" -gt 0 ] && bl_wait_quiet
		bl_load_mark
		if ! (cd "$dir" && "$@") >"$out/$name.txt" 2>&1; then
			cat "$out/$name.txt" >&2
			bl_die "failed: $* (output in $out/$name.txt)"
		fi
		bl_load_report
		if [ "$BENCH_QUIET_WAIT" -gt 0 ] && [ $try -le "$BENCH_RETRIES" ] && bl_le "$BENCH_QUIET_CORES" "${bl_load% *}"; then
			echo "[$(date -u +%H:%M:%S)] $name: other processes used ${bl_load% *} cores meanwhile: running it again" >&2
			mv "$out/$name.txt" "$out/$name.disturbed-$try.txt"
			continue
		fi
		break
	done
	printf '%s\t%s\t%s\n' "$name" "$bl_load" "$try" | tr ' ' '\t' >>"$out/load.tsv"
}
