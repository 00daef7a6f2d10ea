"""Programs that include each header of a release through the label that provided it (tests/api/releases.bzl)."""

load("//tools:cc.bzl", "cc_library", "cc_test")

def old_label_programs(name, releases, removed):
    """Per release, `<name>_<release>_test`: one library per label, including each of its headers, and a test that
    links them all, so that a header a label no longer provides ("undeclared inclusion") fails the build.

    Args:
      name: the prefix of the targets.
      releases: {release: [(label, header), ...]}, as releases.bzl gives it.
      removed: {header: changelog fragment}: headers gone since (skipped here; removed_headers_test checks the
        CHANGELOG says so).
    """
    for release, pairs in releases.items():
        by_label = {}
        for label, header in pairs:
            if header in removed:
                continue
            by_label.setdefault(label, []).append(header)
        libraries = []
        for index, label in enumerate(sorted(by_label.keys())):
            base = "%s_%s_%d" % (name, release, index)
            lines = ["// %s of release %s" % (label, release)] + ['#include "%s"' % header for header in by_label[label]]
            native.genrule(
                name = base + "_source",
                testonly = True,
                outs = [base + ".cc"],
                cmd = " && ".join([": > $@"] + ["echo '%s' >> $@" % line for line in lines]),
            )
            cc_library(
                name = base,
                testonly = True,
                srcs = [base + ".cc"],
                # The old headers are deprecated forwarding headers on purpose.
                copts = ["-Wno-deprecated-declarations"],
                torch_pch = True,
                deps = [label],
            )
            libraries.append(":" + base)
        cc_test(
            name = "%s_%s_test" % (name, release),
            size = "small",
            srcs = ["old_labels_main.cc"],
            args = [release, str(len(pairs) - len([p for p in pairs if p[1] in removed])), str(len(by_label))],
            deps = libraries,
        )
