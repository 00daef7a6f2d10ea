// A stand-in for Habana's PyTorch bridge (libhabana_pytorch_plugin.so) that loads but registers nothing: tests use it
// to show what happens when the library is present but gives LibTorch no 'hpu' device. Test support only; built as
// libfake_habana_bridge.so.
extern "C" __attribute__((visibility("default"))) int kiln_fake_habana_bridge() { return 1; }
