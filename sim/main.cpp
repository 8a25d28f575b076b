// moesim: the command-line entry point. Only this file maps errors to exit codes.
#include <unistd.h>

#include <exception>
#include <iostream>

#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "sim/cli/cli.hpp"

int main(int argc, char** argv) {
  using namespace moesim;
  common::install_interrupt_handlers();  // SIGINT/SIGTERM remove temporaries and stop workers
  cli::Context ctx{std::cout, std::cerr, isatty(STDOUT_FILENO) == 1};
  cli::Args args(argv + 1, argv + argc);
  try {
    return cli::run_cli(args, ctx);
  } catch (const common::UsageError& e) {
    std::cerr << "moesim: " << e.what() << "\n";
    return common::kExitInputError;
  } catch (const common::InputError& e) {
    std::cerr << "moesim: error: " << e.what() << "\n";
    return common::kExitInputError;
  } catch (const common::RunError& e) {
    std::cerr << "moesim: failed: " << e.what() << "\n";
    return common::kExitRunFailure;
  } catch (const std::bad_alloc&) {
    std::cerr << "moesim: internal error: out of memory\n";
    return common::kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "moesim: internal error: " << e.what() << "\n";
    return common::kExitInternal;
  }
}
