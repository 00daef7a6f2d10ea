#include "trainer/checkpoint/format/checkpoint_file.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c10/util/Exception.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"

namespace kiln {

namespace {

absl::Status CannotSerialise(const std::string& path, absl::string_view why) {
  return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", why));
}

// Sets the format records in `contents`'s "kiln" section (created when missing).
absl::Status SetFormat(const std::string& path, c10::impl::GenericDict& contents) {
  try {
    const c10::IValue key{std::string(kKilnSectionKey)};
    if (!contents.contains(key))
      contents.insert(key, c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
    c10::impl::GenericDict kiln = contents.at(key).toGenericDict();
    kiln.insert_or_assign(std::string(kKilnFormatKey), std::string(kKilnFormatValue));
    kiln.insert_or_assign(std::string(kKilnFormatVersionKey), kCheckpointFormatVersion);
  } catch (const c10::Error& e) {
    return CannotSerialise(path, e.what_without_backtrace());
  }
  return absl::OkStatus();
}

template <typename Sink>
void FormatRecords(Sink& out) {
  out.Key(kKilnFormatKey);
  out.String(kKilnFormatValue);
  out.Key(kKilnFormatVersionKey);
  out.Int(kCheckpointFormatVersion);
}

}  // namespace

void WriteFormatRecords(PickleWriter& out) { FormatRecords(out); }

void WriteFormatRecords(ValueBuilder& out) { FormatRecords(out); }

absl::StatusOr<std::string> SerializeCheckpoint(const std::string& path, c10::impl::GenericDict contents) {
  if (absl::Status status = SetFormat(path, contents); !status.ok()) return status;
  absl::StatusOr<std::string> bytes = SerializeTorchFile(contents);
  if (!bytes.ok()) return CannotSerialise(path, bytes.status().message());
  return bytes;
}

absl::Status WriteCheckpoint(const std::string& path, c10::impl::GenericDict contents) {
  if (absl::Status status = SetFormat(path, contents); !status.ok()) return status;
  // As pieces: the tensors' bytes go to the file from where they are, without a copy into one buffer.
  absl::StatusOr<TorchFilePieces> file = SerializeTorchFilePieces(contents);
  if (!file.ok()) return CannotSerialise(path, file.status().message());
  return WriteFileDurably(path, absl::MakeConstSpan(file->pieces()), kCheckpointWrite);
}

}  // namespace kiln
