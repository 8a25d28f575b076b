// A small mixed-integer program (minimise) and its solve on GLPK under a branch-and-bound node limit
// and an optional wall-clock limit. Columns and rows are numbered from 1, as GLPK numbers them.
// Contract: the model is index-checked in C++ before any GLPK call, and a GLPK internal error ends the
// solve (ran = false) instead of the process. glpk_mip.cpp is the only file that includes <glpk.h>.
#pragma once

#include <limits>
#include <vector>

namespace moesim::sim {

// lower <= row, row <= upper, lower <= row <= upper, row == lower.
enum class RowBound { kLower, kUpper, kRange, kFixed };

class MipModel {
 public:
  struct Column {
    double lower = 0.0, upper = 0.0;  // upper may be +infinity
    bool integer = false;
    double objective = 0.0;
  };
  struct Row {
    RowBound bound = RowBound::kLower;
    double lower = 0.0, upper = 0.0;
  };

  int add_col(double lower, double upper, bool integer, double objective);  // returns its number
  int add_row(RowBound bound, double lower, double upper);                  // returns its number
  // Throws std::logic_error on an index out of range or a value that is not finite; drops zeros.
  void add(int row, int col, double value);

  int rows() const { return static_cast<int>(rows_.size()); }
  int cols() const { return static_cast<int>(cols_.size()); }
  const std::vector<Column>& columns() const { return cols_; }
  const std::vector<Row>& row_bounds() const { return rows_; }
  // The coefficients as glp_load_matrix takes them: entry 0 unused, then (row, column, value).
  const std::vector<int>& coefficient_rows() const { return ia_; }
  const std::vector<int>& coefficient_cols() const { return ja_; }
  const std::vector<double>& coefficient_values() const { return ar_; }

 private:
  std::vector<Column> cols_;
  std::vector<Row> rows_;
  std::vector<int> ia_{0}, ja_{0};
  std::vector<double> ar_{0.0};
};

struct MipOutcome {
  bool ran = false;  // GLPK completed without an error
  bool has_solution = false;
  bool optimal = false;
  bool limit_hit = false;
  double objective = 0.0;
  double bound = -std::numeric_limits<double>::infinity();  // valid lower bound on the optimum
  std::vector<double> x;                                    // column values, 0-based
};

// warm: a feasible start, one value per column (0-based), or empty. node_limit: branch-and-bound nodes
// (0 = none); time_limit: wall-clock seconds (0 = none). The simplex has a fixed iteration limit, so
// that without a time limit the result is the same on every machine.
MipOutcome solve_mip(const MipModel& model, const std::vector<double>& warm, int node_limit, double time_limit);

}  // namespace moesim::sim
