"""Checks report.html as Chromium rendered it. Usage: check_report.py <dom.html> <screenshot.png> <metrics.csv>
<width> <height> [text the summary must show ...].

The DOM (after rendering) must hold a curve for every metric of metrics.csv that changes, with one path vertex per
value metrics.csv holds for it, and list every constant metric (two or more values, all the same) with its value
instead of charting it; a metric with one value is either a dot on a chart or listed. Every chart's ticks must be
round values with labels free of float noise, and the summary at the top must carry the command line and the
checkpoint paths (passed as the optional last arguments). The plan table must be there; the screenshot must be a
PNG of the window's size that is not blank: many colours, and the curves' colours drawn. The PNG is decoded here with zlib (no imaging library).
"""
import collections
import csv
import html.parser
import re
import struct
import sys
import zlib

dom_path, png_path, metrics_path, width, height = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
# Optional, after these: texts that the summary table at the top must show (the command line, checkpoint paths).


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


class Dom(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.paths = {}
        self.svgs = 0
        self.text = []
        self.sections = set()
        self.uncharted = {}  # name -> (why, value text)
        self.ticks = []
        self.summary = {}
        self._row = None
        self._cells = None
        self._text_class = None
        self._table = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        if tag == "section" and "id" in attrs:
            self.sections.add(attrs["id"])
        if tag == "path" and attrs.get("class") == "series":
            self.paths[attrs["data-series"]] = (int(attrs["data-points"]), attrs["d"])
        if tag == "table":
            self._table = attrs.get("id")
        if tag == "tr":
            self._row = attrs
            self._cells = []
        if tag in ("th", "td") and self._cells is not None:
            self._cells.append("")
        if tag == "text":
            self._text_class = attrs.get("class", "")

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            if "data-metric" in self._row:
                self.uncharted[self._row["data-metric"]] = (self._row["data-why"], self._cells[1])
            elif self._table == "summary" and len(self._cells) == 2:
                self.summary[self._cells[0]] = self._cells[1]
            self._row = self._cells = None
        if tag == "text":
            self._text_class = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cells:
            self._cells[-1] += data
        if self._text_class and "tick" in self._text_class:
            self.ticks.append(data)


dom = Dom()
dom.feed(open(dom_path).read())
text = " ".join(dom.text)
if not {"metrics", "device-stats", "tables"} <= dom.sections:
    fail("sections missing: %s" % dom.sections)

# Values per metric, from metrics.csv (written by the CSV logger, not by the report).
values = collections.defaultdict(list)
with open(metrics_path) as f:
    for row in csv.DictReader(f):
        for name, cell in row.items():
            if cell != "" and name not in ("step", "epoch"):
                values[name].append(cell)
counts = {name: len(cells) for name, cells in values.items()}
for name, cells in values.items():
    constant = len(cells) >= 2 and len(set(cells)) == 1
    if constant:
        if name in dom.paths:
            fail("%s is constant (%s) but charted" % (name, cells[0]))
        if dom.uncharted.get(name, ("",))[0] != "constant":
            fail("%s is constant (%s) but not listed as constant: %s" % (name, cells[0], dom.uncharted.get(name)))
        if abs(float(dom.uncharted[name][1]) - float(cells[0])) > 1e-5 * abs(float(cells[0])):
            fail("%s is listed as %s, metrics.csv has %s" % (name, dom.uncharted[name][1], cells[0]))
        continue
    if len(cells) == 1 and name not in dom.paths:
        if dom.uncharted.get(name, ("",))[0] != "once":
            fail("%s has one value and is neither charted nor listed" % name)
        continue
    if name not in dom.paths:
        fail("no curve for %s" % name)
    points, d = dom.paths[name]
    vertices = len(re.findall(r"[ML] [-0-9.]+ [-0-9.]+", d))
    if points != len(cells) or vertices != len(cells):
        fail("%s: %d points (%d vertices drawn), metrics.csv has %d values" % (name, points, vertices, len(cells)))
# Tick labels: round numbers, one format, no float noise (0.30000000000000004) and no "0.05K".
if not dom.ticks:
    fail("no tick labels")
for label in dom.ticks:
    if not re.fullmatch(r"-?[0-9]+(\.[0-9]{1,6})?[kMGT]?|-?[0-9]\.[0-9]+e[-+][0-9]+", label):
        fail("tick label %r is not a plain round number" % label)
# The summary at the top: how to run it again and where the checkpoints are.
for needle in sys.argv[6:]:
    if not any(needle in value for value in dom.summary.values()):
        fail("the summary does not show %r: %s" % (needle, dom.summary))
device_curves = [name for name in dom.paths if name not in values]
if not device_curves or any(dom.paths[name][0] < 2 for name in device_curves):
    fail("device statistics curves missing or with fewer than 2 samples: %s" % device_curves)
for needle in ("single_device", "32-true", "Total params", "params_sha256"):
    if needle not in text:
        fail("the rendered page does not show %r" % needle)


def read_png(path):
    blob = open(path, "rb").read()
    if blob[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    at, idat, header = 8, b"", None
    while at < len(blob):
        (length,) = struct.unpack(">I", blob[at:at + 4])
        kind, data = blob[at + 4:at + 8], blob[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        at += 12 + length
    w, h, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace != 0:
        fail("unexpected PNG format: depth %d, colour type %d, interlace %d" % (depth, color, interlace))
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * channels
    rows, previous = [], bytearray(stride)
    for y in range(h):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        previous = line
    pixels = collections.Counter()
    for line in rows:
        for x in range(0, stride, channels):
            pixels[tuple(line[x:x + 3])] += 1
    return w, h, pixels


w, h, pixels = read_png(png_path)
if (w, h) != (width, height):
    fail("the screenshot is %dx%d, not %dx%d" % (w, h, width, height))
background, most = pixels.most_common(1)[0]
if len(pixels) < 50 or most > 0.98 * w * h:
    fail("the screenshot looks blank: %d colours, %.1f%% one colour" % (len(pixels), 100.0 * most / (w * h)))
blue, orange = pixels[(0x1F, 0x77, 0xB4)], pixels[(0xFF, 0x7F, 0x0E)]
if blue < 200 or orange < 50:
    fail("the curves are not drawn: %d pixels of the first series' blue, %d of the second's orange" % (blue, orange))
print("not charted: %s; %d tick labels" % (", ".join(sorted(dom.uncharted)) or "none", len(dom.ticks)))
print("rendered: %d curves, %d charts; screenshot %dx%d with %d colours, %d blue and %d orange curve pixels" %
      (len(dom.paths), dom.svgs, w, h, len(pixels), blue, orange))
