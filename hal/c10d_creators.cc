#include "hal/c10d_creators.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"
#include "hal/compat/error_message.h"

namespace kiln {
namespace {

// A demangled name, or "" when `mangled` is not a C++ name.
std::string Demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> readable(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && readable != nullptr ? std::string(readable.get()) : std::string();
}

// c10d's creator parameters as the demangler writes them ("(c10::intrusive_ptr<c10d::Store, ...> const&, int, int,
// std::chrono::duration<float, std::ratio<1l, 1l> > const&)"), taken from the type itself so that it follows the
// compiler's spelling.
const std::string& CreatorParameters() {
  static const std::string* parameters = [] {
    const std::string readable = Demangle(typeid(std::remove_pointer_t<C10dCreatorFunction>).name());
    const size_t open = readable.find('(');
    return new std::string(open == std::string::npos ? readable : readable.substr(open));
  }();
  return *parameters;
}

// A file mapped read-only, unmapped when it goes.
class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  absl::Status Map(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    struct stat info;
    if (::fstat(fd, &info) != 0 || info.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, " is too short to be a shared library"));
    }
    size_ = static_cast<size_t>(info.st_size);
    void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) return absl::InternalError(absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
    data_ = data;
    return absl::OkStatus();
  }
  const char* bytes() const { return static_cast<const char*>(data_); }
  size_t size() const { return size_; }
  // Whether [offset, offset + length) lies inside the file.
  bool Holds(uint64_t offset, uint64_t length) const { return offset <= size_ && length <= size_ - offset; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

std::string Lower(absl::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

}  // namespace

std::string C10dBackendNameOf(const std::string& function) {
  // The components of "ns::ProcessGroupOCCL::createProcessGroupOCCL", last first.
  std::vector<absl::string_view> parts;
  absl::string_view rest = function;
  for (size_t at; (at = rest.find("::")) != absl::string_view::npos; rest.remove_prefix(at + 2)) {
    parts.push_back(rest.substr(0, at));
  }
  parts.push_back(rest);
  const absl::string_view name = parts.back();
  for (absl::string_view prefix : {"createProcessGroup", "createBackend", "create_process_group_", "create_backend_"}) {
    if (absl::StartsWith(name, prefix) && name.size() > prefix.size()) return Lower(name.substr(prefix.size()));
  }
  if (parts.size() >= 2) {
    const absl::string_view owner = parts[parts.size() - 2];
    for (absl::string_view prefix : {"ProcessGroup", "Backend"}) {
      if (absl::StartsWith(owner, prefix) && owner.size() > prefix.size()) return Lower(owner.substr(prefix.size()));
    }
  }
  return "";
}

absl::StatusOr<std::vector<C10dCreator>> FindC10dCreators(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return absl::FailedPreconditionError(absl::StrCat(path, " is not loaded in this process"));
  // Balances the reference RTLD_NOLOAD took; the caller's own keeps the library loaded.
  struct Closer {
    void* handle;
    ~Closer() { ::dlclose(handle); }
  } closer{handle};
  // The file the loader mapped (a soname such as "libhabana_pytorch_plugin.so" is found on the loader's path).
  std::string file_path = path;
  struct link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name) {
    file_path = map->l_name;
  }
  MappedFile file;
  if (absl::Status mapped = file.Map(file_path); !mapped.ok()) return mapped;
  const auto* header = reinterpret_cast<const Elf64_Ehdr*>(file.bytes());
  if (std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 || header->e_ident[EI_CLASS] != ELFCLASS64 ||
      header->e_shentsize != sizeof(Elf64_Shdr) ||
      !file.Holds(header->e_shoff, uint64_t{header->e_shnum} * sizeof(Elf64_Shdr))) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a 64-bit ELF shared library"));
  }
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(file.bytes() + header->e_shoff);
  std::vector<C10dCreator> creators;
  for (int s = 0; s < header->e_shnum; ++s) {
    const Elf64_Shdr& table = sections[s];
    if (table.sh_type != SHT_DYNSYM || table.sh_entsize != sizeof(Elf64_Sym) || table.sh_link >= header->e_shnum) {
      continue;
    }
    const Elf64_Shdr& names = sections[table.sh_link];
    if (!file.Holds(table.sh_offset, table.sh_size) || !file.Holds(names.sh_offset, names.sh_size)) continue;
    const auto* symbols = reinterpret_cast<const Elf64_Sym*>(file.bytes() + table.sh_offset);
    const char* strings = file.bytes() + names.sh_offset;
    for (size_t i = 0; i < table.sh_size / sizeof(Elf64_Sym); ++i) {
      const Elf64_Sym& symbol = symbols[i];
      if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC || symbol.st_shndx == SHN_UNDEF ||
          symbol.st_name >= names.sh_size) {
        continue;
      }
      const char* mangled = strings + symbol.st_name;
      if (std::memchr(mangled, '\0', names.sh_size - symbol.st_name) == nullptr) continue;
      if (std::strncmp(mangled, "_Z", 2) != 0) continue;
      const std::string readable = Demangle(mangled);
      const size_t open = readable.find('(');
      if (open == std::string::npos || readable.compare(open, std::string::npos, CreatorParameters()) != 0) continue;
      void* address = ::dlsym(handle, mangled);
      if (address == nullptr) continue;
      C10dCreator creator;
      creator.function = readable.substr(0, open);
      creator.backend = C10dBackendNameOf(creator.function);
      creator.create = reinterpret_cast<C10dCreatorFunction>(address);
      creators.push_back(std::move(creator));
    }
  }
  return creators;
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateC10dBackend(const C10dCreator& creator,
                                                                    const CollectiveOptions& options) {
  const std::chrono::duration<float> timeout = options.timeout;
  try {
    c10::intrusive_ptr<c10d::Backend> backend =
        creator.create(options.store, options.rank, options.world_size, timeout);
    if (!backend) {
      return absl::InternalError(absl::StrCat("the c10d backend '", creator.backend, "' (", creator.function,
                                              ") returned no backend"));
    }
    return backend;
  } catch (const c10::DistError& e) {
    return absl::UnavailableError(absl::StrCat("the c10d backend '", creator.backend, "' (", creator.function,
                                               "): ", compat::ExceptionMessage(e)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the c10d backend '", creator.backend, "' (", creator.function,
                                            ") failed: ", compat::ExceptionMessage(e)));
  }
}

}  // namespace kiln
