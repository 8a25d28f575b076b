// Error types shared by every library. Library code throws; only main() maps them to exit codes:
// 0 ok, 1 run failure (RunError), 2 usage or input error (UsageError, InputError), 3 internal error
// (anything else). Messages are complete sentences a user can act on: they name the file, line or
// record, what was expected, what was found and, where known, the fix.
#pragma once

#include <stdexcept>
#include <string>

namespace moesim::common {

// Bad input: a config, trace, profile or placement that cannot be used as given. Exit code 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad command line: unknown option, missing argument, conflicting flags. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The input was fine but the run could not complete (I/O failure, solver failure, no GPU). Exit code 1.
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum ExitCode : int { kExitOk = 0, kExitRunFailure = 1, kExitInputError = 2, kExitInternal = 3 };

}  // namespace moesim::common
