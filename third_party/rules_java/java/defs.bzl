"""Offline stand-in for @rules_java: each rule forwards to Bazel's built-in one.

Bazel 4.2.3 registers JDK toolchains that load @rules_java even in a C++-only project; with no network the real
repository cannot be fetched, so WORKSPACE points @rules_java here instead.
"""

def java_binary(**kwargs):
    native.java_binary(**kwargs)

def java_import(**kwargs):
    native.java_import(**kwargs)

def java_library(**kwargs):
    native.java_library(**kwargs)

def java_plugin(**kwargs):
    native.java_plugin(**kwargs)

def java_runtime(**kwargs):
    native.java_runtime(**kwargs)

def java_test(**kwargs):
    native.java_test(**kwargs)

def java_toolchain(**kwargs):
    native.java_toolchain(**kwargs)
