#!/usr/bin/env bash
# Kiln's layering, checked on the real dependency graph and sources:
#   hal       depends on no Kiln package above it (backends, connector, trainer, tools), its plugin loader neither;
#   plugins   the sample accelerator plugin depends on the plugin C header alone; the sample device plugin on the C
#             header, the device kit's sources and LibTorch alone (no Kiln library, the kit's included);
#   connector depends on no backend and names none in its code, nor any hardware or collective backend;
#   backends  depend on neither the connector nor the trainer, built-in and third-party ones alike, and no Kiln
#             package names a third-party backend (they come in through the WORKSPACE's kiln_backends).
#   trainer   its libraries depend on no backend: programs link //backends:linked. Inside it (trainer/README.md):
#             core uses no other room of the trainer; strategies and precision use the core only; checkpointing the
#             core and precision, its byte format the io utilities alone, its sharded checkpoints the format; the
#             loggers and the data the core only; the profilers the HAL and the io utilities only; the loops
#             (//trainer) sit on top.
# The checker is first shown failing on known-bad inputs, so a broken checker cannot pass silently.
set -uo pipefail

dir=tests/layering
check=$dir/check_layering.sh
failures=0

expect() {  # expect <0|1> <description> <command>...
  local want=$1 what=$2
  shift 2
  local output got
  output=$("$@" 2>&1)
  got=$?
  if [[ $got -ne $want ]]; then
    echo "FAIL: $what (exit $got, wanted $want)"
    echo "$output" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}

# The checker itself.
expect 1 "checker catches a connector that depends on a backend" \
  $check deps connector $dir/testdata/bad_deps.txt //backends
expect 1 "checker catches a backend name in code" \
  $check names $dir/testdata/backend_words.txt $dir/testdata/names_backend.cc.txt
expect 1 "checker catches a collective backend's name in code" \
  $check names $dir/testdata/hardware_words.txt $dir/testdata/names_collective.cc.txt
expect 1 "checker catches a core that depends on the trainer's top package" \
  $check deps core $dir/testdata/trainer_room_deps.txt //trainer:
expect 0 "checker's package-only prefix (//trainer:) leaves the trainer's subpackages alone" \
  $check deps core $dir/testdata/trainer_subpackages_deps.txt //trainer:
expect 0 "checker ignores backend names in comments" \
  $check names $dir/testdata/backend_words.txt $dir/testdata/comment_only.cc.txt

# The real graph.
expect 0 "hal depends on nothing above it" \
  $check deps hal $dir/hal_deps //backends //connector //trainer //tools
expect 0 "the plugin loader (hal/plugin) depends on nothing above the HAL" \
  $check deps hal-plugin $dir/hal_plugin_deps //backends //connector //trainer //tools
# Everything the sample plugin depends on, other than the C header's own target, is a violation.
expect 0 "the sample plugin depends on the plugin C header alone (no Kiln library, no LibTorch)" \
  $check deps sample-plugin $dir/sample_plugin_deps //hal:hal //hal/plugin:plugin //backends //connector //trainer \
  @libtorch @abseil @kiln_backends
if ! grep -qx '//hal/plugin:c_api' $dir/sample_plugin_deps; then
  echo "FAIL: the sample plugin does not depend on //hal/plugin:c_api (is the query right?)"
  failures=$((failures + 1))
fi
# The device plugin: every label it depends on must be one of its own files, the C header or the version script, the
# device kit's sources (files, not the kit's library), LibTorch's, or the genrule's own setup script.
device_plugin_violations() {
  grep -v -x -E '//examples/device_plugin:[A-Za-z0-9_.]+|//hal/plugin:kiln_plugin_(c_api[.]h|exports[.]lds)|'\
'//hal/device_kit:(sources|[a-z_]+[.](h|cc))|@libtorch//:.+|@bazel_tools//tools/genrule:genrule-setup[.]sh' "$1"
}
bad_device_plugin_deps=$(mktemp)
printf '%s\n' //examples/device_plugin:plugins //hal/device_kit:sources //hal/device_kit:device_kit \
  //hal/plugin:plugin @abseil//:base > "$bad_device_plugin_deps"
expect 0 "checker catches a device plugin that links the kit's library, the loader or Abseil" \
  test "$(device_plugin_violations "$bad_device_plugin_deps" | tr '\n' ' ')" = \
  "//hal/device_kit:device_kit //hal/plugin:plugin @abseil//:base "
violations=$(device_plugin_violations $dir/device_plugin_deps || true)
if [[ -n "$violations" ]]; then
  echo "FAIL: the sample device plugin depends on more than the C header, the kit's sources and LibTorch:"
  echo "$violations" | sed 's/^/  /'
  failures=$((failures + 1))
else
  echo "ok: the sample device plugin depends on the C header, the kit's sources and LibTorch alone" \
    "($(wc -l < $dir/device_plugin_deps) labels checked)"
fi
for needed in //hal/plugin:kiln_plugin_c_api.h //hal/device_kit:sources @libtorch//:version_header; do
  if ! grep -qx "$needed" $dir/device_plugin_deps; then
    echo "FAIL: the sample device plugin does not depend on $needed (is the query right?)"
    failures=$((failures + 1))
  fi
done
expect 0 "connector depends on no backend and not on the trainer" \
  $check deps connector $dir/connector_deps //backends //trainer //tools
expect 0 "built-in backends depend on neither the connector nor the trainer" \
  $check deps backends $dir/backends_deps //connector //trainer //tools
expect 0 "the trainer's libraries depend on no backend (programs link //backends:linked)" \
  $check deps trainer $dir/trainer_deps //backends @kiln_backends @virtual_npu
expect 0 "the trainer's top library uses neither the command line nor the report (fit lives in //trainer/cli)" \
  $check deps trainer-top $dir/trainer_top_deps //trainer/cli //trainer/report //tools
if ! grep -qx '//trainer:trainer' $dir/trainer_top_deps; then
  echo "FAIL: $dir/trainer_top_deps does not hold //trainer:trainer (is the query right?)"
  failures=$((failures + 1))
fi
expect 0 "the trainer's io utilities use no room of the trainer and no LibTorch" \
  $check deps trainer-io $dir/trainer_io_deps //trainer: //trainer/core //trainer/strategies //trainer/plugins \
  //trainer/checkpoint //trainer/cli //trainer/data //trainer/loggers //trainer/models //trainer/optim \
  //trainer/report @libtorch //backends
# The trainer's rooms. Everything above the core, for the rooms that may use only the core:
above_core=(//trainer: //trainer/strategies //trainer/plugins //trainer/checkpoint //trainer/callbacks //trainer/cli
  //trainer/data //trainer/loggers //trainer/models //trainer/optim //trainer/report //backends //tools)
expect 0 "the trainer's core uses no other room of the trainer" \
  $check deps trainer-core $dir/trainer_core_deps "${above_core[@]}"
if ! grep -qx '//trainer/core:core' $dir/trainer_core_deps; then
  echo "FAIL: $dir/trainer_core_deps does not hold //trainer/core:core (is the query right?)"
  failures=$((failures + 1))
fi
expect 0 "the strategies use the core only (not precision, checkpointing or the loops)" \
  $check deps trainer-strategies $dir/trainer_strategies_deps //trainer: //trainer/plugins //trainer/checkpoint \
  //trainer/cli //trainer/data //trainer/loggers //trainer/models //trainer/report //backends
# Every library of a room is in its query: a library added to the room's BUILD without it fails here.
# every_library_queried <BUILD> <package label> <deps file> <at least>.
every_library_queried() {
  local build=$1 package=$2 deps=$3 least=$4 library count=0
  for library in $(awk '/^cc_library\(/ { library = 1 }
      library && /name = "/ { match($0, /"[^"]+"/); print substr($0, RSTART + 1, RLENGTH - 2); library = 0 }' \
      "$build"); do
    count=$((count + 1))
    if ! grep -qx "$package:$library" "$deps"; then
      echo "FAIL: $deps does not hold $package:$library: add it to the query"
      failures=$((failures + 1))
    fi
  done
  if [[ $count -lt $least ]]; then
    echo "FAIL: found $count libraries in $build, expected at least $least"
    failures=$((failures + 1))
  else
    echo "ok: the query of $package holds each of its $count libraries"
  fi
}
every_library_queried trainer/strategies/BUILD //trainer/strategies $dir/trainer_strategies_deps 10
expect 0 "fsdp's options (included by the trainer's options and fit's flags) use no LibTorch, HAL or connector" \
  $check deps trainer-fsdp-options $dir/trainer_fsdp_options_deps @libtorch //hal //connector //trainer: \
  //trainer/core //backends
expect 0 "the precision plugins use the core only (not strategies, checkpointing or the loops)" \
  $check deps trainer-precision $dir/trainer_precision_deps //trainer: //trainer/strategies //trainer/checkpoint \
  //trainer/cli //trainer/data //trainer/loggers //trainer/models //trainer/report //backends
expect 0 "checkpointing uses the core and precision only (not strategies or the loops)" \
  $check deps trainer-checkpoint $dir/trainer_checkpoint_deps //trainer: //trainer/strategies //trainer/cli \
  //trainer/data //trainer/loggers //trainer/models //trainer/report //backends
# The checkpoint package's rooms (trainer/checkpoint/BUILD): the byte format knows nothing of checkpoints' contents,
# the sharded checkpoints nothing of the trainer.
expect 0 "the checkpoint's byte format uses the io utilities alone (no room of the trainer, no other checkpoint room)" \
  $check deps trainer-checkpoint-format $dir/trainer_checkpoint_format_deps //trainer: //trainer/core \
  //trainer/strategies //trainer/plugins //trainer/checkpoint: //trainer/checkpoint/lightning \
  //trainer/checkpoint/sharded //trainer/cli //trainer/data //trainer/loggers //trainer/models //trainer/optim \
  //trainer/report //backends
every_library_queried trainer/checkpoint/format/BUILD //trainer/checkpoint/format \
  $dir/trainer_checkpoint_format_deps 8
expect 0 "sharded checkpoints use the byte format and io utilities (not the trainer's core, nor Lightning's layout)" \
  $check deps trainer-checkpoint-sharded $dir/trainer_checkpoint_sharded_deps //trainer: //trainer/core \
  //trainer/strategies //trainer/plugins //trainer/checkpoint: //trainer/checkpoint/lightning //trainer/cli \
  //trainer/data //trainer/loggers //trainer/models //trainer/optim //trainer/report //backends
# The profilers know action names, not the loops that time them: the trainer's top uses them, never the reverse.
expect 0 "the profilers use the HAL, the io utilities, LibTorch and nlohmann_json (no loop, no other room)" \
  $check deps trainer-profilers $dir/trainer_profilers_deps //trainer: //trainer/core //trainer/strategies \
  //trainer/plugins //trainer/checkpoint //trainer/callbacks //trainer/cli //trainer/data //trainer/loggers \
  //trainer/models //trainer/optim //trainer/report //connector //backends @kiln_backends @virtual_npu //tools
every_library_queried trainer/profilers/BUILD //trainer/profilers $dir/trainer_profilers_deps 1
expect 0 "the loggers and the data build on the trainer's core alone" \
  $check deps trainer-loggers-data $dir/trainer_loggers_data_deps //trainer: //trainer/strategies //trainer/plugins \
  //trainer/checkpoint //trainer/cli //trainer/models //trainer/report //backends
expect 0 "the learning-rate schedulers build on the trainer's core alone" \
  $check deps trainer-optim $dir/trainer_optim_deps //trainer: //trainer/strategies //trainer/plugins \
  //trainer/checkpoint //trainer/callbacks //trainer/cli //trainer/data //trainer/loggers //trainer/models \
  //trainer/report //backends
# The rooms above the loops: the models (below the trainer's top, which prints their summary), the report (above the
# top, below the command line) and the command line's libraries (the fit program alone links backends).
expect 0 "the models use the core, the data and the optimizers (not the loops, strategies or checkpointing)" \
  $check deps trainer-models $dir/trainer_models_deps //trainer: //trainer/strategies //trainer/plugins \
  //trainer/checkpoint //trainer/cli //trainer/report //backends //tools
expect 0 "the report uses no command line, backend or tool" \
  $check deps trainer-report $dir/trainer_report_deps //trainer/cli //backends //tools
expect 0 "the command line's libraries link no backend and no tool (the fit program links //backends:linked)" \
  $check deps trainer-cli $dir/trainer_cli_deps //backends @kiln_backends @virtual_npu //tools
for room in trainer_models_deps:supervised_module trainer_report_deps:run_report trainer_cli_deps:fit_config; do
  if ! grep -q ":${room#*:}\$" "$dir/${room%%:*}"; then
    echo "FAIL: $dir/${room%%:*} does not hold ${room#*:} (is the query right?)"
    failures=$((failures + 1))
  fi
done
# Third-party backends (linked through the WORKSPACE's kiln_backends) sit at the same layer.
expect 0 "third-party backends depend on neither the connector nor the trainer" \
  $check deps linked-backends $dir/linked_backends_deps //connector //trainer //tools
if ! grep -q '^@kiln_backends//:backends$' $dir/linked_backends_deps; then
  echo "FAIL: //backends:linked does not link @kiln_backends//:backends"
  failures=$((failures + 1))
fi
# No Kiln package names the sample third-party device: only the repository kiln_backends generates refers to it.
others=$(grep -v -E '^@(virtual_npu|kiln_backends)//' $dir/virtual_npu_users || true)
if [[ -n "$others" ]]; then
  echo "FAIL: Kiln's own targets depend on @virtual_npu directly (it must come only through kiln_backends):"
  echo "$others" | sed 's/^/  /'
  failures=$((failures + 1))
else
  echo "ok: only @kiln_backends refers to @virtual_npu ($(wc -l < $dir/virtual_npu_users) targets checked)"
fi

# The connector's sources name no backend: the backends are the packages under //backends that the built-in set
# links, so a new backend is covered as soon as it is added to //backends:builtin, and the repositories of the
# third-party backends that the WORKSPACE's kiln_backends lists.
words=$(mktemp)
{
  sed -n -E 's|^//backends/([^:/]+)[:/].*|\1|p' $dir/backends_deps
  # Third-party backends are named after their repositories (the sample's is virtual_npu).
  sed -n -E 's|^@([^/]+)//.*|\1|p' $dir/third_party_backends
} | sort -u > "$words"
for backend in cpu cuda hpu; do
  if ! grep -qx "$backend" "$words"; then
    echo "FAIL: $backend is not among the built-in backends listed from $dir/backends_deps (got: $(tr '\n' ' ' < "$words"))"
    failures=$((failures + 1))
  fi
done
sources=(connector/*.h connector/*.cc)
connector_sources=()
for file in "${sources[@]}"; do
  [[ "$file" == *_test.cc ]] || connector_sources+=("$file")
done
if [[ ${#connector_sources[@]} -lt 10 ]]; then
  echo "FAIL: only ${#connector_sources[@]} connector sources reached the test; is //connector:sources complete?"
  failures=$((failures + 1))
fi
expect 0 "connector code names no backend ($(tr '\n' ' ' < "$words"))" \
  $check names "$words" "${connector_sources[@]}"
# Nor any hardware, device type or collective backend that Kiln does not link (yet): a third-party backend must
# win "auto" and choose its collective backend without the connector knowing its name.
expect 0 "connector code names no hardware or collective backend ($(tr '\n' ' ' < $dir/testdata/hardware_words.txt))" \
  $check names $dir/testdata/hardware_words.txt "${connector_sources[@]}"

if [[ $failures -ne 0 ]]; then
  echo "$failures layering check(s) failed"
  exit 1
fi
echo "all layering checks passed"
