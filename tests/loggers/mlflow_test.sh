#!/usr/bin/env bash
# Kiln's MLFlowLogger read back by MLflow's own client (read_mlflow.py), run by run against Kiln's CSV logger of the
# same run: a user's program (logger_program.cc) and fit, logging over REST to a real `mlflow server` started here
# (SQLite backend, artifacts served by the server, on a free port of 127.0.0.1), and into MLflow's file store. Params,
# every metric's history per step, tags, the run's status, and the checkpoints uploaded as artifacts (log_model).
# Then what a user gets wrong: a server that is not there, an https:// URI, a bad --mlflow_log_model.
set -uo pipefail
tracking_modules=mlflow
source tests/loggers/common.sh

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
uri=http://127.0.0.1:$port
# In a session of its own, so that the server's workers stop with it.
setsid "$python" -m mlflow server --host 127.0.0.1 --port "$port" --backend-store-uri "sqlite:///$work/mlflow.db" \
  --serve-artifacts --artifacts-destination "$work/served" --workers 1 >server.log 2>&1 &
server=$!
trap 'kill -- -$server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 300); do
  "$python" -c "import urllib.request; urllib.request.urlopen('$uri/health', timeout=2)" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || break
  sleep 1
done
if ! "$python" -c "import urllib.request; urllib.request.urlopen('$uri/health', timeout=2)" 2>/dev/null; then
  echo "FAIL: mlflow server did not start on $uri:"
  tail -20 server.log
  exit 1
fi

hparams="batch_size=32;hidden_sizes=[64, 64];learning_rate=0.001"
# The value of `key=` in the program's output.
value() { sed -n "s/^$1=//p" "$2"; }

# 1. A user's program over REST, with its checkpoints uploaded at the end (log_model=True).
if "$program" --root=rest --tracking_uri="$uri" --log_model=true --run_name=kiln-program >rest.out 2>rest.err; then
  csv=$(value csv rest.out)
  "$python" "$here/read_mlflow.py" "$uri" "$(value mlflow_run rest.out)" "$csv" --params "$hparams" \
    --tag team=kiln --tag mlflow.runName=kiln-program --run_name kiln-program --artifacts \
    --ckpt_dir "$(dirname "$csv")/checkpoints" >rest.check 2>&1 || fail "program over REST: $(tail -5 rest.check)"
  cat rest.check
else
  fail "the program over REST failed: $(tail -5 rest.err)"
fi

# 2. The same program into MLflow's file store, read by MLflow's client (which reads a file store only when allowed).
if "$program" --root=files --tracking_uri="file:$work/mlruns" --log_model=true >files.out 2>files.err; then
  csv=$(value csv files.out)
  MLFLOW_ALLOW_FILE_STORE=true "$python" "$here/read_mlflow.py" "file:$work/mlruns" "$(value mlflow_run files.out)" \
    "$csv" --params "$hparams" --tag team=kiln --artifacts --ckpt_dir "$(dirname "$csv")/checkpoints" \
    >files.check 2>&1 || fail "program into the file store: $(tail -5 files.check)"
  cat files.check
  [[ -f mlruns/0/meta.yaml && -d mlruns/.trash ]] || fail "the file store lacks MLflow's Default experiment"
else
  fail "the program into the file store failed: $(tail -5 files.err)"
fi

# 3. fit over REST, with the CSV logger beside it: the same comparison, the params against its hparams.yaml. With
# log_model=all every checkpoint is uploaded when saved, also the one the next save replaces (8 steps an epoch: 512
# examples in batches of 64; fit keeps the newest and last.ckpt).
if "$fit" --max_epochs=2 --num_train=512 --num_val=128 --log_every_n_steps=5 --enable_progress_bar=false \
  --default_root_dir=fit --logger=csv,mlflow --mlflow_tracking_uri="$uri" --mlflow_experiment_name=kiln_fit \
  --mlflow_run_name=from-fit --mlflow_log_model=all --report=false >fit.out 2>fit.err; then
  "$python" "$here/read_mlflow.py" "$uri" newest:kiln_fit fit/lightning_logs/version_0/metrics.csv \
    --hparams_yaml fit/lightning_logs/version_0/hparams.yaml --run_name from-fit --artifacts \
    --expect_artifacts epoch=0-step=8,epoch=1-step=16,last >fit.check 2>&1 ||
    fail "fit over REST: $(tail -5 fit.check)"
  cat fit.check
else
  fail "fit with --logger=csv,mlflow failed: $(tail -5 fit.err)"
fi

# 4. What a user gets wrong. No server there: fit stops, naming the URI.
gone=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$fit" --max_epochs=1 --num_train=64 --num_val=32 --default_root_dir=gone --logger=mlflow --report=false \
  --mlflow_tracking_uri="http://127.0.0.1:$gone" >gone.out 2>gone.err
status=$?
[[ $status != 0 ]] || fail "fit with no MLflow server there succeeded"
grep -q "127.0.0.1:$gone" gone.err || fail "the error does not name the server: $(tail -3 gone.err)"
"$fit" --logger=mlflow --mlflow_tracking_uri=https://127.0.0.1:1 >https.out 2>https.err
status=$?
[[ $status == 2 ]] || fail "an https:// tracking URI: exit $status, not 2"
grep -q "https://127.0.0.1:1" https.err || fail "the https error does not name the URI: $(tail -3 https.err)"
"$fit" --logger=mlflow --mlflow_log_model=sometimes >log_model.out 2>log_model.err
status=$?
[[ $status == 2 ]] || fail "--mlflow_log_model=sometimes: exit $status, not 2"
grep -q "sometimes" log_model.err || fail "the log_model error does not name the value: $(tail -3 log_model.err)"

finish "MLflow read back what Kiln logged: over REST and in the file store, from a program and from fit"
