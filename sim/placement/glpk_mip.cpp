#include "sim/placement/glpk_mip.hpp"

#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <stdexcept>
#include <string>

namespace moesim::sim {

int MipModel::add_col(double lower, double upper, bool integer, double objective) {
  cols_.push_back(Column{lower, upper, integer, objective});
  return cols();
}

int MipModel::add_row(RowBound bound, double lower, double upper) {
  rows_.push_back(Row{bound, lower, upper});
  return rows();
}

void MipModel::add(int row, int col, double value) {
  if (row < 1 || row > rows() || col < 1 || col > cols() || !std::isfinite(value))
    throw std::logic_error("MipModel: bad coefficient (" + std::to_string(row) + ", " + std::to_string(col) + ")");
  if (value == 0.0) return;
  ia_.push_back(row);
  ja_.push_back(col);
  ar_.push_back(value);
}

namespace {

int glpk_row_type(RowBound bound) {
  switch (bound) {
    case RowBound::kLower:
      return GLP_LO;
    case RowBound::kUpper:
      return GLP_UP;
    case RowBound::kRange:
      return GLP_DB;
    case RowBound::kFixed:
      return GLP_FX;
  }
  throw std::logic_error("MipModel: unknown row bound");
}

// Everything the guarded GLPK call and its callback touch: plain data only, so that a longjmp out of
// the error hook skips no destructor.
struct GlpkJob {
  const MipModel* model = nullptr;
  const double* warm = nullptr;  // 1-based, or null
  int warm_given = 0;
  int nodes = 0;
  int node_limit = 0;
  int time_limit_ms = 0;  // 0 = none
  double recorded_bound = 0.0;
  int bound_known = 0;
  int intopt_rc = 0;
  int mip_status = 0;
  double lp_bound = 0.0;
  int lp_ok = 0;
  double mip_obj = 0.0;
  double* x_out = nullptr;  // 1-based, cols + 1
  std::jmp_buf env;
};

extern "C" void moesim_glpk_error_hook(void* info) {
  // GLPK calls this on an internal error instead of abort(); leave the solver for good.
  std::longjmp(static_cast<GlpkJob*>(info)->env, 1);
}

extern "C" void moesim_glpk_callback(glp_tree* tree, void* info) {
  auto* job = static_cast<GlpkJob*>(info);
  switch (glp_ios_reason(tree)) {
    case GLP_IHEUR:
      if (job->warm && !job->warm_given) {
        job->warm_given = 1;
        glp_ios_heur_sol(tree, job->warm);
      }
      break;
    case GLP_ISELECT: {
      ++job->nodes;
      const int best = glp_ios_best_node(tree);
      if (best != 0) {
        job->recorded_bound = glp_ios_node_bound(tree, best);
        job->bound_known = 1;
      }
      if (job->node_limit > 0 && job->nodes > job->node_limit) glp_ios_terminate(tree);
      break;
    }
    default:
      break;
  }
}

void load_model(glp_prob* lp, const MipModel& m) {
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_rows(lp, m.rows());
  for (int i = 1; i <= m.rows(); ++i) {
    const MipModel::Row& row = m.row_bounds()[static_cast<std::size_t>(i - 1)];
    glp_set_row_bnds(lp, i, glpk_row_type(row.bound), row.lower, row.upper);
  }
  glp_add_cols(lp, m.cols());
  for (int j = 1; j <= m.cols(); ++j) {
    const MipModel::Column& col = m.columns()[static_cast<std::size_t>(j - 1)];
    const double lb = col.lower, ub = col.upper;
    const int type = std::isinf(ub) ? GLP_LO : (lb == ub ? GLP_FX : GLP_DB);
    glp_set_col_bnds(lp, j, type, lb, std::isinf(ub) ? 0.0 : ub);
    glp_set_obj_coef(lp, j, col.objective);
    if (col.integer) glp_set_col_kind(lp, j, GLP_IV);
  }
  glp_load_matrix(lp, static_cast<int>(m.coefficient_values().size()) - 1, m.coefficient_rows().data(),
                  m.coefficient_cols().data(), m.coefficient_values().data());
}

// The LP relaxation, then branch and bound from the warm start; results into `job`.
void solve_loaded(glp_prob* lp, GlpkJob& job) {
  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_OFF;
  smcp.presolve = GLP_OFF;
  smcp.it_lim = 200000;  // a work limit: the same on every machine
  if (job.time_limit_ms > 0) smcp.tm_lim = job.time_limit_ms;
  if (glp_simplex(lp, &smcp) != 0 || glp_get_status(lp) != GLP_OPT) return;
  job.lp_ok = 1;
  job.lp_bound = glp_get_obj_val(lp);
  glp_iocp iocp;
  glp_init_iocp(&iocp);
  iocp.msg_lev = GLP_MSG_OFF;
  iocp.presolve = GLP_OFF;    // with presolve a warm start is checked against the wrong problem
  iocp.br_tech = GLP_BR_DTH;  // GLP_BR_PCH ignores tm_lim
  iocp.bt_tech = GLP_BT_BLB;
  iocp.mip_gap = 0.0;
  if (job.time_limit_ms > 0) iocp.tm_lim = job.time_limit_ms;
  iocp.cb_func = moesim_glpk_callback;
  iocp.cb_info = &job;
  job.intopt_rc = glp_intopt(lp, &iocp);
  job.mip_status = glp_mip_status(lp);
  if (job.mip_status == GLP_OPT || job.mip_status == GLP_FEAS) {
    job.mip_obj = glp_mip_obj_val(lp);
    for (int j = 1; j <= job.model->cols(); ++j) job.x_out[j] = glp_mip_col_val(lp, j);
  }
}

// Returns false when GLPK reported an error (through the hook).
bool run_glpk(GlpkJob& job) {
  if (setjmp(job.env) != 0) {
    glp_error_hook(nullptr, nullptr);
    glp_free_env();  // the problem object died with the environment
    return false;
  }
  glp_error_hook(moesim_glpk_error_hook, &job);
  glp_term_out(GLP_OFF);
  glp_prob* lp = glp_create_prob();
  load_model(lp, *job.model);
  solve_loaded(lp, job);
  glp_delete_prob(lp);
  glp_error_hook(nullptr, nullptr);
  return true;
}

}  // namespace

MipOutcome solve_mip(const MipModel& model, const std::vector<double>& warm, int node_limit, double time_limit) {
  MipOutcome out;
  std::vector<double> warm1(static_cast<std::size_t>(model.cols()) + 1, 0.0);
  if (!warm.empty()) {
    if (warm.size() != static_cast<std::size_t>(model.cols())) throw std::logic_error("solve_mip: warm start size");
    std::copy(warm.begin(), warm.end(), warm1.begin() + 1);
  }
  std::vector<double> x1(static_cast<std::size_t>(model.cols()) + 1, 0.0);
  GlpkJob job;
  job.model = &model;
  job.warm = warm.empty() ? nullptr : warm1.data();
  job.node_limit = node_limit;
  job.time_limit_ms = time_limit > 0 ? static_cast<int>(std::clamp(time_limit * 1000.0, 1.0, 2.0e9)) : 0;
  job.x_out = x1.data();
  if (!run_glpk(job)) return out;
  out.ran = true;
  if (!job.lp_ok) return out;
  out.bound = job.lp_bound;
  if (job.mip_status == GLP_OPT || job.mip_status == GLP_FEAS) {
    out.has_solution = true;
    out.objective = job.mip_obj;
    out.x.assign(x1.begin() + 1, x1.end());
  }
  out.optimal = job.intopt_rc == 0 && job.mip_status == GLP_OPT;
  out.limit_hit = !out.optimal;
  if (out.optimal) {
    out.bound = out.objective;
  } else if (job.bound_known) {
    out.bound = std::max(out.bound, job.recorded_bound);
  }
  if (out.has_solution) out.bound = std::min(out.bound, out.objective);
  return out;
}

}  // namespace moesim::sim
