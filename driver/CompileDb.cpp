//===--- CompileDb.cpp - torch-tidy driver --------------------------------===//

#include "CompileDb.h"

#include "Finding.h"
#include "clang/Tooling/JSONCompilationDatabase.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/VirtualFileSystem.h"

using namespace llvm;
using namespace clang::tooling;

namespace torchtidy {

static Error fail(const Twine &Message) {
  return createStringError(inconvertibleErrorCode(), Message);
}

/// Validates the structure that JSONCompilationDatabase would otherwise
/// reject with a multi-line YAML diagnostic, or accept silently.
static Error validateDatabase(StringRef Path, StringRef Text) {
  if (Text.trim().empty())
    return fail("'" + Path + "' is empty");
  Expected<json::Value> Parsed = json::parse(Text);
  if (!Parsed)
    return fail("malformed JSON in '" + Path +
                "': " + toString(Parsed.takeError()));
  const json::Array *Entries = Parsed->getAsArray();
  if (!Entries)
    return fail("'" + Path + "' must hold a JSON array of compile commands");
  if (Entries->empty())
    return fail("'" + Path + "' has no entries");
  for (size_t I = 0; I < Entries->size(); ++I) {
    std::string Where = formatv("'{0}': entry {1}", Path, I).str();
    const json::Object *Entry = (*Entries)[I].getAsObject();
    if (!Entry)
      return fail(Where + " is not an object");
    std::optional<StringRef> Dir = Entry->getString("directory");
    if (!Dir)
      return fail(Where + " has no \"directory\" string");
    if (!sys::path::is_absolute(*Dir))
      return fail(Where + ": \"directory\" must be an absolute path, not '" +
                  *Dir + "'");
    if (!Entry->getString("file"))
      return fail(Where + " has no \"file\" string");
    bool HasCommand = Entry->getString("command").has_value();
    if (const json::Array *Args = Entry->getArray("arguments")) {
      for (const json::Value &A : *Args)
        if (!A.getAsString())
          return fail(Where + ": \"arguments\" must hold only strings");
      HasCommand = HasCommand || !Args->empty();
    }
    if (!HasCommand)
      return fail(Where + " has neither \"command\" nor \"arguments\"");
  }
  return Error::success();
}

Expected<std::unique_ptr<CompilationDatabase>>
loadCompileDatabase(StringRef BuildDir) {
  if (!sys::fs::is_directory(BuildDir))
    return fail("build directory '" + BuildDir + "' does not exist");
  SmallString<256> Path(BuildDir);
  sys::path::append(Path, "compile_commands.json");
  if (!sys::fs::exists(Path))
    return fail("no compile_commands.json in '" + BuildDir + "'");
  auto Buf = MemoryBuffer::getFile(Path);
  if (!Buf)
    return fail("cannot read '" + Path + "': " + Buf.getError().message());
  if (Error E = validateDatabase(Path, (*Buf)->getBuffer()))
    return E;
  std::string Message;
  std::unique_ptr<CompilationDatabase> DB = JSONCompilationDatabase::loadFromFile(
      Path, Message, JSONCommandLineSyntax::AutoDetect);
  if (!DB)
    return fail("cannot load '" + Path + "': " + Message);
  // Like clang-tidy: expand @response files, infer --target/--driver-mode
  // from the compiler name.
  DB = expandResponseFiles(std::move(DB), vfs::createPhysicalFileSystem());
  return inferTargetAndDriverMode(std::move(DB));
}

std::string findCompileDatabaseDir(StringRef File) {
  SmallString<256> Dir(sys::path::parent_path(File));
  while (!Dir.empty()) {
    SmallString<256> Candidate(Dir);
    sys::path::append(Candidate, "compile_commands.json");
    if (sys::fs::exists(Candidate))
      return std::string(Dir);
    StringRef Parent = sys::path::parent_path(Dir);
    if (Parent == Dir)
      break;
    Dir = Parent;
  }
  return "";
}

std::string checkInputFile(StringRef Path) {
  sys::fs::file_status Status;
  if (std::error_code EC = sys::fs::status(Path, Status))
    return formatv("'{0}': {1}", Path, EC.message()).str();
  if (Status.type() == sys::fs::file_type::directory_file)
    return formatv("'{0}' is a directory, not a source file", Path).str();
  // Opening a FIFO would block until someone writes to it.
  if (Status.type() != sys::fs::file_type::regular_file)
    return formatv("'{0}' is not a regular file", Path).str();
  if (std::error_code EC = sys::fs::access(Path, sys::fs::AccessMode::Exist))
    return formatv("'{0}': {1}", Path, EC.message()).str();
  // Opening is the only reliable readability test (root ignores modes).
  Expected<sys::fs::file_t> FD = sys::fs::openNativeFileForRead(Path);
  if (!FD)
    return formatv("cannot read '{0}': {1}", Path, toString(FD.takeError()))
        .str();
  sys::fs::closeFile(*FD);
  return "";
}

std::string resolveJob(StringRef File, const CommandSources &Sources,
                       TUJob &Job) {
  Job.File = normalizePath(File);
  if (std::string Problem = checkInputFile(Job.File); !Problem.empty())
    return Problem;
  if (Sources.Database)
    Job.Commands = Sources.Database->getCompileCommands(Job.File);
  if (Job.Commands.empty() && Sources.Fixed)
    Job.Commands = Sources.Fixed->getCompileCommands(Job.File);
  if (Job.Commands.empty()) {
    if (Sources.Database)
      return formatv("'{0}' is not in the compilation database '{1}' and no "
                     "compiler flags were given after '--'; skipped",
                     Job.File, Sources.DatabasePath)
          .str();
    // Neither a database nor `--`: run with no flags, like clang-tidy.
    SmallString<256> Cwd;
    sys::fs::current_path(Cwd);
    FixedCompilationDatabase NoFlags(Cwd, {});
    Job.Commands = NoFlags.getCompileCommands(Job.File);
  }
  // The same command listed twice would only duplicate every finding.
  std::vector<CompileCommand> Unique;
  for (CompileCommand &C : Job.Commands)
    if (llvm::none_of(Unique, [&](const CompileCommand &U) {
          return U.Directory == C.Directory && U.CommandLine == C.CommandLine;
        }))
      Unique.push_back(std::move(C));
  Job.Commands = std::move(Unique);
  return "";
}

} // namespace torchtidy
