#!/bin/sh
# extract_example.sh README NAME: prints the code block that follows `<!-- readme-example: NAME -->` in README, so
# that the README's examples are compiled as written. Fails when there is no such block, or it is not closed.
awk -v name="$2" '
  $0 == "<!-- readme-example: " name " -->" { want = 1; next }
  want == 1 && /^```/ { want = 2; found = 1; next }
  want == 2 && /^```/ { want = 0; closed = 1; next }
  want == 2 { print }
  END { if (!found || !closed) { print "no closed code block after <!-- readme-example: " name " -->" > "/dev/stderr"; exit 1 } }
' "$1"
