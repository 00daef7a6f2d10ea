#!/usr/bin/env bash
# report.html through the real //trainer:fit binary, opened the way a person opens it: from disk, in a browser
# (headless Chromium, Debian's `chromium`), with no network. check_report.py checks the rendered DOM against
# metrics.csv and looks at the screenshot's pixels. Without a Chromium that starts, the rendering checks are
# skipped with the reason (the report's structure is still checked by //trainer/report:html_report_test).
set -uo pipefail
fit=$PWD/trainer/cli/fit
checker=$PWD/tests/cli/check_report.py
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
export HOME=$work  # Chromium writes its profile and caches under HOME.

$fit --max_epochs=4 --log_every_n_steps=10 --enable_progress_bar=false --default_root_dir=runs >fit.out 2>fit.err ||
  { echo "FAIL: fit failed: $(tail -3 fit.err)"; exit 1; }
run=$work/runs/lightning_logs/version_0
[[ -s "$run/report.html" ]] || { echo "FAIL: no report.html"; exit 1; }
# Self-contained: nothing to fetch.
if grep -Eo '(src|href)=|<script|<link|url\(|@import' "$run/report.html"; then
  echo "FAIL: report.html refers to outside resources"
  exit 1
fi

chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$chromium" ]]; then
  echo "SKIPPED: no chromium on this machine (install Debian's chromium, as tools/setup.sh does); the rendering was"
  echo "not checked, only the file's structure (//trainer/report:html_report_test)"
  exit 0
fi
width=1280
height=2000
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update
       --disable-sync --no-first-run --disable-extensions --hide-scrollbars --user-data-dir="$work/profile"
       --window-size=$width,$height)
if ! timeout 120 "$chromium" "${flags[@]}" --dump-dom "file://$run/report.html" >dom.html 2>chromium.err ||
   [[ ! -s dom.html ]]; then
  echo "SKIPPED: chromium is installed but could not render here: $(grep -v -e dbus -e '^$' chromium.err | tail -3)"
  exit 0
fi
timeout 120 "$chromium" "${flags[@]}" --screenshot="$work/shot.png" "file://$run/report.html" >/dev/null \
  2>>chromium.err || { echo "FAIL: chromium rendered the DOM but not a screenshot: $(tail -3 chromium.err)"; exit 1; }
# The summary carries the command line as typed and the checkpoint paths.
$python "$checker" dom.html shot.png "$run/metrics.csv" $width $height "--max_epochs=4 --log_every_n_steps=10" \
  "lightning_logs/version_0/checkpoints/last.ckpt" "lightning_logs/version_0/checkpoints/epoch=3-step=" || exit 1
echo "report checks passed"
