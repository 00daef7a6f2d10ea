// Kiln's checkpoint file as bytes: the torch.save dictionary (torch_file.h) with its "kiln" section's format records,
// serialised whole or written durably. Reading it back, and the checkpoints of older formats, are
// trainer/checkpoint/checkpoint_io.h's; what the dictionary holds is trainer/checkpoint/lightning/'s.
//
// Thread-safety: the functions are independent of each other.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_CHECKPOINT_FILE_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>

#include "ATen/core/Dict.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/io/durable_file.h"

namespace kiln {

class PickleWriter;  // trainer/checkpoint/format/pickle_writer.h
class ValueBuilder;  // trainer/checkpoint/format/snapshot_dict.h

inline constexpr int64_t kCheckpointFormatVersion = 2;
inline constexpr char kCheckpointExtension[] = ".ckpt";
inline constexpr char kKilnSectionKey[] = "kiln";
// How every checkpoint file is written (WriteFileDurably): named a checkpoint in errors, a symbolic link at its path
// replaced rather than written through, and the checkpoint it replaces removed after the write returns.
inline constexpr DurableWriteOptions kCheckpointWrite{
    .what = "checkpoint", .follow_links = false, .remove_replaced_later = true};

// The records of the "kiln" section that say a file is Kiln's checkpoint, and of which format version.
inline constexpr char kKilnFormatKey[] = "kiln_format";
inline constexpr char kKilnFormatValue[] = "kiln.checkpoint";
inline constexpr char kKilnFormatVersionKey[] = "kiln_format_version";

// The bytes of a checkpoint file holding `contents` (a dictionary with string keys), after setting the format
// records in its "kiln" section (created when missing). Errors name `path` (used in messages only).
absl::StatusOr<std::string> SerializeCheckpoint(const std::string& path, c10::impl::GenericDict contents);

// SerializeCheckpoint, then writes it durably (WriteFileDurably; a symbolic link at `path` is replaced).
absl::Status WriteCheckpoint(const std::string& path, c10::impl::GenericDict contents);

// The format records of the "kiln" section (its key, value pairs, written last in it), as SerializeCheckpoint sets
// them: for a checkpoint written piece by piece (CheckpointSnapshot::pickle).
void WriteFormatRecords(PickleWriter& out);
void WriteFormatRecords(ValueBuilder& out);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_CHECKPOINT_FILE_H_
