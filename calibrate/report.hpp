// Console tables in nccl-tests' style (a '#' header with units, one row per measurement, printed as
// it completes), plus the device context block opening a run, as Google Benchmark's reporter does.
// Only the console rounds; files keep full precision.
#pragma once

#include <ostream>
#include <string>

#include "calibrate/measurements.hpp"

namespace moesim::calibrate {

void print_context(std::ostream& out, const DeviceInfo& d, const std::string& plan);
void print_gemm_header(std::ostream& out);
void print_gemm_row(std::ostream& out, const GemmRecord& r);
void print_grouped_row(std::ostream& out, const GroupedRecord& r);
void print_collective_header(std::ostream& out);
void print_collective_row(std::ostream& out, const CollectiveRecord& r);
void print_traffic_row(std::ostream& out, const TrafficRecord& r);
void print_contention_header(std::ostream& out);
void print_contention_row(std::ostream& out, const ContentionRecord& r);
void print_power_header(std::ostream& out);
void print_power_row(std::ostream& out, const PowerRecord& r);
// nccl-tests' element type names: float, half, bfloat16.
std::string nccl_type_name(int type_size);

}  // namespace moesim::calibrate
