#!/usr/bin/env bash
# One call on the GPU machine: runs the binaries built here (scripts/build_portable.sh, carried as
# build-cuda/) — op checks, backend tests, the GEMV lab, the benchmark — with full logs in $OUT and
# a short summary last. Steps are chosen by name: scripts/device.sh ops tests lab bench (also: chain
# [bench/chain_lab, the persistent GEMV chain], smbw [bench/sm_bw_lab, the DRAM bandwidth of G SMs],
# icache [bench/icache_lab, what cold code costs], sync [bench/sync_lab, the step boundary's
# price], floor and floorbase [gdn bench --floor: the decode with no arithmetic, all exact rungs /
# baseline + graphs], floorfold [the same with each recurrence and attention folded into the
# GEMV before it], floortests [its GPU test], ncu [the one-launch GEMV's stall reasons per SASS
# line], ncudecode [the same in decode steps], ncurecurrence [the same for the GDN recurrence in
# decode steps], ncuattention [and for attention], ncuchain [the same for the chain kernel], profile
# [every kernel's time in decode steps, one at a time under ncu], prefillprofile [the same for pp512
# prefills], sass, prevsass, altsass [the one-launch GEMV's SASS of gdn, gdn_prev, gdn_alt],
# timeline and timelinebase [gdn bench --timeline, all exact rungs / baseline + graphs],
# timelinetests, opsof [OPS="a b": gdn ops --op per name; OPS_PERF=1: with --perf], testsof
# [TESTS_FILTER="A.*:B.*": those of test_cuda_backend's tests], opsperf, ladder,
# benchladder, nulls, benchbase [baseline granularity + graphs], tg [tg128 alone], tinytg,
# prevtinytg and alttinytg [tg128 of the tiny preset: a few µs of host work show], tgctx and
# timelinectx [the same at CTX="160 256" context bounds], prevbench,
# prevbenchbase, prevtimeline and prevtg [bench, benchbase, timeline and tg with a carried
# gdn_prev], prevlab [the lab carried as gemv_lab_prev], alttg, alttimeline and altbench [tg,
# timeline and bench with a carried gdn_alt, a second variant], tg:NAME, timeline:NAME and
# bench:NAME [with a carried gdn_NAME, any further variant], benchnographs, compare, comparef32).
# Every log comes back in $OUT/logs.tgz: the script moves them there as it ends, so a command
# that reads a log on the GPU machine must do so before then (e.g. by a step of its own).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gdn-device}
mkdir -p "$out"
# Binaries: build-cuda/ when built there, else the stripped ones carried in .carry/bins.tar.xz
# (scripts/carry_bins.sh packs them, with gdn_prev / gdn_alt built from other commits).
bin=build-cuda
if [ -f .carry/bins.tar.xz ]; then
  mkdir -p /tmp/gdn-bin && tar xJf .carry/bins.tar.xz -C /tmp/gdn-bin
  mkdir -p /tmp/gdn-bin/src/app /tmp/gdn-bin/tests /tmp/gdn-bin/bench
  ln -sf ../../gdn /tmp/gdn-bin/src/app/gdn
  ln -sf ../test_cuda_backend /tmp/gdn-bin/tests/test_cuda_backend
  ln -sf ../test_cuda_ladder /tmp/gdn-bin/tests/test_cuda_ladder
  ln -sf ../gemv_lab /tmp/gdn-bin/bench/gemv_lab
  ln -sf ../chain_lab /tmp/gdn-bin/bench/chain_lab
  ln -sf ../sm_bw_lab /tmp/gdn-bin/bench/sm_bw_lab
  ln -sf ../icache_lab /tmp/gdn-bin/bench/icache_lab
  ln -sf ../sync_lab /tmp/gdn-bin/bench/sync_lab
  bin=/tmp/gdn-bin
fi
steps=("$@")
export GDN_SOURCE_DIR=$PWD
[ ${#steps[@]} -gt 0 ] || steps=(ops tests lab bench)
summary=()

run_step() {  # name, command...
  local name=$1
  shift
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-500}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$out/$name.log")")")
}

# Launches of a kernel under ncu and their stall reasons per SASS line (tabulated by
# scripts/ncu_stalls.py): step name, kernel regex, launches of it skipped first, then the
# command (NCU_COUNT launches, default 1; warp-state samples every 2^(5 + NCU_SAMPLING)
# cycles, default 0: the densest).
ncu_stalls() {
  local name=$1 kernel=$2 skip=$3
  shift 3
  run_step "$name" ncu --clock-control none --cache-control "${NCU_CACHE:-none}" \
    --kernel-name-base demangled -k "regex:$kernel" --launch-skip "$skip" \
    --launch-count "${NCU_COUNT:-1}" --warp-sampling-interval "${NCU_SAMPLING:-0}" \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section SourceCounters -f -o "$out/$name" "$@"
  run_step "$name-details" ncu --import "$out/$name.ncu-rep" --page details
  run_step "$name-source" ncu --import "$out/$name.ncu-rep" --page source --print-source sass --csv
  run_step "$name-table" python3 scripts/ncu_stalls.py "$out/$name-source.log"
}

# The SASS of a binary's one-launch Q1_0 GEMV (kQ = 2): step name, the binary. Only the
# GEMV's comes back (gzipped): the whole binary's SASS, even gzipped, made logs.tgz larger
# than a file the device tool returns (16 MiB).
gemv_sass() {
  local name=$1 exe=$2
  run_step "$name" cuobjdump -sass -arch sm_90a "$exe"
  awk '/Function : .*q1_gemv_kernelILi2E/{p=1} p&&/Function : /&&!/q1_gemv_kernelILi2E/{p=0} p' \
    "$out/$name.log" | gzip >"$out/${name}_gemv.txt.gz"
  echo "$(wc -l <"$out/$name.log") lines of SASS; the GEMV's in ${name}_gemv.txt.gz" >"$out/$name.log"
}

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,temperature.gpu --format=csv >"$out/gpu.txt" 2>&1
for s in "${steps[@]}"; do
  case "$s" in
    ops) run_step ops "$bin/src/app/gdn" ops ;;
    # The op checks of some ops only (OPS="attention_prep matmul_fused_q1_0": one gdn ops --op each,
    # each running only the check families it selects).
    opsof) for o in ${OPS:?set OPS to the op names}; do run_step "ops_$o" "$bin/src/app/gdn" ops --op "$o" ${OPS_PERF:+--perf}; done ;;
    profile) run_step profile ncu --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv --print-units base --kernel-name-base demangled \
      --launch-skip "${PROFILE_SKIP:-2000}" --launch-count "${PROFILE_COUNT:-1100}" \
      "$bin/src/app/gdn" bench -p 0 -n 16 -r 1 --rounds 1 --rungs all,-graphs
    # PROFILE_DISPATCHES: the decode's dispatches per token, as gdn bench prints them (340 with
    # every exact rung since the fold, gdn bench on an H100, 2026-12-05).
    python3 scripts/profile_table.py "$out/profile.log" --dispatches "${PROFILE_DISPATCHES:-340}" \
      >"$out/profile_table.log" 2>&1 ;;
    # The same for pp512: every launch of the bench's two prefills (warm-up and timed; the
    # synthetic model is built on the host), so the table's totals are two prefills' worth.
    prefillprofile) run_step prefillprofile ncu --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv --print-units base --kernel-name-base demangled \
      --launch-skip "${PROFILE_SKIP:-0}" --launch-count "${PROFILE_COUNT:-5000}" \
      "$bin/src/app/gdn" bench -p 512 -n 0 -r 1 --rounds 1
    python3 scripts/profile_table.py "$out/prefillprofile.log" --dispatches 0 \
      >"$out/prefillprofile_table.log" 2>&1 ;;
    opsperf) run_step opsperf "$bin/src/app/gdn" ops --perf ;;
    tests) run_step tests "$bin/tests/test_cuda_backend" ;;
    # Some GPU tests only (TESTS_FILTER="CudaSlots.*:CudaGraphs.*"), after the binaries are
    # unpacked: a script that runs the carried test binary itself before any step finds none.
    # Not GTEST_FILTER: every GoogleTest binary reads that, so the ladder step ran no test.
    testsof) run_step testsof "$bin/tests/test_cuda_backend" \
      --gtest_filter="${TESTS_FILTER:?set TESTS_FILTER}" ;;
    ladder) run_step ladder "$bin/tests/test_cuda_ladder" ;;
    benchladder) run_step benchladder "$bin/src/app/gdn" bench --ladder -r 2 --rounds 2 -v ;;
    nulls) run_step nulls "$bin/src/app/gdn" bench -p 0 -n 64 -r 2 --rounds 2 \
      --null-dispatches 0,250,500,1000 ;;
    lab) run_step lab "$bin/bench/gemv_lab" ;;
    prevlab) run_step prevlab "$bin/gemv_lab_prev" ;;
    # Line-buffered: a chain that hangs (a timeout) still leaves its lines so far.
    chain) run_step chain stdbuf -oL "$bin/bench/chain_lab" ;;
    smbw) run_step smbw "$bin/bench/sm_bw_lab" ;;
    icache) run_step icache "$bin/bench/icache_lab" ;;
    sync) run_step sync "$bin/bench/sync_lab" ;;
    floor) run_step floor "$bin/src/app/gdn" bench --floor -r 3 --rounds 2 -v ;;
    floorbase) run_step floorbase "$bin/src/app/gdn" bench --floor -r 3 --rounds 2 --rungs graphs ;;
    floorfold) run_step floorfold "$bin/src/app/gdn" bench --floor -r 3 --rounds 2 \
      --floor-fold gdn_recurrence,attention -v ;;
    floortests) run_step floortests "$bin/tests/test_cuda_backend" --gtest_filter='CudaFloor.*' ;;
    # Caches left warm (--cache-control none) and a launch from the lab's timing loop, as in a
    # decode step: ${NCU_SKIP:-40} launches of the kernel skipped first (past the checks and the
    # timelines, into the first timed graph).
    # The regex takes the untraced kQ = 2 kernel in either spelling ncu gives its name
    # (<2, 0> or <(int)2, (bool)0>); the one before, <.int.2>, matches neither (it was written
    # before the kernel gained its kTraced parameter).
    ncu) ncu_stalls ncu 'q1_gemv_kernel<(\(int\))?2, (\(bool\))?(0|false)>' "${NCU_SKIP:-40}" \
      "$bin/bench/gemv_lab" ;;
    # The chain kernel: by default bench/chain_lab's second check run (chain 1: x from L2, warp
    # tiles, the producer held).
    ncuchain) ncu_stalls ncuchain q1_chain_kernel "${NCU_CHAIN_SKIP:-1}" "$bin/bench/chain_lab" ;;
    # The one-launch GEMV in the decode itself (graphs off, so ncu sees each launch):
    # NCU_COUNT consecutive launches (default 4, a layer's worth) from the NCU_SKIP-th (default
    # 1285, a few tokens in); the details page tells the steps apart by grid and shared memory.
    ncudecode) NCU_COUNT=${NCU_COUNT:-4} ncu_stalls ncudecode q1_gemv_kernel \
      "${NCU_SKIP:-1285}" "$bin/src/app/gdn" bench -p 0 -n 16 -r 1 --rounds 1 --rungs all,-graphs ;;
    # The GDN recurrence in the decode the same way: NCU_COUNT launches (default 1) from the
    # NCU_SKIP-th (default 480: ten tokens of 48 GDN layers in).
    ncurecurrence) ncu_stalls ncurecurrence gdn_kernel "${NCU_SKIP:-480}" "$bin/src/app/gdn" \
      bench -p 0 -n 16 -r 1 --rounds 1 --rungs all,-graphs ;;
    # And attention: NCU_SKIP default 160, ten tokens of 16 attention layers in.
    ncuattention) ncu_stalls ncuattention attention_kernel "${NCU_SKIP:-160}" "$bin/src/app/gdn" \
      bench -p 0 -n 16 -r 1 --rounds 1 --rungs all,-graphs ;;
    # The one-launch Q1_0 GEMV's SASS (sm_90a), for counting instructions per slot; prevsass and
    # altsass: the same for gdn_prev and gdn_alt, to compare the code two variants run.
    sass) gemv_sass sass "$bin/src/app/gdn" ;;
    prevsass) gemv_sass prevsass "$bin/gdn_prev" ;;
    altsass) gemv_sass altsass "$bin/gdn_alt" ;;
    bench) run_step bench "$bin/src/app/gdn" bench -r 3 --rounds 2 ;;
    timeline) run_step timeline "$bin/src/app/gdn" bench --timeline -n 16 ;;
    timelinebase) run_step timelinebase "$bin/src/app/gdn" bench --timeline -n 16 --rungs graphs ;;
    timelinetests) run_step timelinetests "$bin/tests/test_cuda_backend" --gtest_filter='CudaTimeline.*' ;;
    benchbase) run_step benchbase "$bin/src/app/gdn" bench -p 0 -r 3 --rounds 2 --rungs graphs ;;
    # The same two benchmarks with gdn_prev (a build of an earlier commit, carried beside gdn in
    # the tarball): a change and its baseline measured side by side in one call.
    prevbench) run_step prevbench "$bin/gdn_prev" bench -r 3 --rounds 2 ;;
    # tg128 alone (no pp512), for a side-by-side pair in a short call.
    tg) run_step tg "$bin/src/app/gdn" bench -p 0 -r 3 --rounds 2 ;;
    # tg128 and the timeline at other context bounds (CTX="160 256": decode attention's key
    # split follows the bound, S = 1 below 256 keys, 2 below 512, 4 below 1024, else 8).
    tgctx) for c in ${CTX:?set CTX to context bounds}; do
      run_step "tg_c$c" "$bin/src/app/gdn" bench -p 0 -r 3 --rounds 2 -c "$c"; done ;;
    timelinectx) for c in ${CTX:?set CTX to context bounds}; do
      run_step "timeline_c$c" "$bin/src/app/gdn" bench --timeline -n 16 -c "$c"; done ;;
    prevtg) run_step prevtg "$bin/gdn_prev" bench -p 0 -r 3 --rounds 2 ;;
    prevtimeline) run_step prevtimeline "$bin/gdn_prev" bench --timeline -n 16 ;;
    prevbenchbase) run_step prevbenchbase "$bin/gdn_prev" bench -p 0 -r 3 --rounds 2 --rungs graphs ;;
    # A second variant (gdn_alt, carried like gdn_prev) beside the change and its baseline.
    alttg) run_step alttg "$bin/gdn_alt" bench -p 0 -r 3 --rounds 2 ;;
    alttimeline) run_step alttimeline "$bin/gdn_alt" bench --timeline -n 16 ;;
    altbench) run_step altbench "$bin/gdn_alt" bench -r 3 --rounds 2 ;;
    # The same with a carried gdn_NAME (scripts/carry_bins.sh --also NAME=REV): tg:NAME,
    # timeline:NAME, bench:NAME.
    tg:*) run_step "tg_${s#tg:}" "$bin/gdn_${s#tg:}" bench -p 0 -r 3 --rounds 2 ;;
    timeline:*) run_step "timeline_${s#timeline:}" "$bin/gdn_${s#timeline:}" bench --timeline -n 16 ;;
    bench:*) run_step "bench_${s#bench:}" "$bin/gdn_${s#bench:}" bench -r 3 --rounds 2 ;;
    # tg128 of the tiny preset: ~140 µs a token (H100), ~120 of them kernels, so a change of a
    # few µs in the host's work a token (uploads, launch, sync) shows where Bonsai-27B's
    # ~2740 µs token hides it in run-to-run spread.
    tinytg) run_step tinytg "$bin/src/app/gdn" bench --preset tiny -p 0 -r 3 --rounds 2 ;;
    prevtinytg) run_step prevtinytg "$bin/gdn_prev" bench --preset tiny -p 0 -r 3 --rounds 2 ;;
    alttinytg) run_step alttinytg "$bin/gdn_alt" bench --preset tiny -p 0 -r 3 --rounds 2 ;;
    benchnographs) run_step benchnographs "$bin/src/app/gdn" bench -r 3 --rounds 2 --rungs all,-graphs ;;
    compare) run_step compare "$bin/src/app/gdn" eval --preset bonsai-27b --type q1_0 \
      --random-ids 128 --mode decode --compare cpu ;;
    comparef32) run_step comparef32 "$bin/src/app/gdn" eval --preset bonsai-27b --type q1_0 \
      --random-ids 128 --mode decode --compare cpu --q1-activations f32 ;;
    *) echo "unknown step $s" >&2 ;;
  esac
done
cat "$out/gpu.txt"
for f in "$out"/*.log; do
  echo "=== $(basename "$f" .log) (tail)"
  tail -n 25 "$f"
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
# The device tool brings back at most 8 files: every log travels in one archive.
tar czf /tmp/gdn-logs.tgz -C "$out" . && find "$out" -mindepth 1 -delete && mv /tmp/gdn-logs.tgz "$out/logs.tgz"
