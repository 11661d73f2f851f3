// The model table (kernel_templates/params.cuh, ModelTraits; runtime/src/op.cpp, ModelRow) through
// the C API (dfgnnModelInputs, dfgnnModelName, dfgnnModelFromName) and the state sizes the host
// derives from it. Expected values are the models' definitions in dfgnn.h (which inputs each reads)
// and the accumulator states of kernel_templates/passes.cuh and variants.cuh, written out by hand;
// the kernels assert their states against the same table when NVRTC compiles them
// (test_nvrtc_all.cpp compiles them all).
#include "test_util.hpp"

#include "op.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <iterator>
#include <string>

namespace {

uint32_t inputs_of(dfgnn_model_t model, int32_t edge, int32_t* logits = nullptr) {
  uint32_t mask = 0xdeadu;
  EXPECT_EQ(dfgnnModelInputs(model, edge, &mask, logits), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return mask;
}

}  // namespace

TEST(ModelTable, InputsPerModel) {
  EXPECT_EQ(inputs_of(DFGNN_MODEL_GAT, 0), DFGNN_INPUT_H | DFGNN_INPUT_ATT_SRC | DFGNN_INPUT_ATT_DST);
  EXPECT_EQ(inputs_of(DFGNN_MODEL_GATV2, 0), DFGNN_INPUT_H | DFGNN_INPUT_H_DST | DFGNN_INPUT_ATT_SRC);
  EXPECT_EQ(inputs_of(DFGNN_MODEL_TRANSFORMER, 0), DFGNN_INPUT_Q | DFGNN_INPUT_K | DFGNN_INPUT_V);
  EXPECT_EQ(inputs_of(DFGNN_MODEL_AGNN, 0), DFGNN_INPUT_H | DFGNN_INPUT_BETA);
  // Bits are dfgnn_inputs_t field positions.
  EXPECT_EQ(DFGNN_INPUT_EDGE, 1u << (offsetof(dfgnn_inputs_t, edge) / sizeof(void*)));
  EXPECT_EQ(DFGNN_INPUT_BETA, 1u << (offsetof(dfgnn_inputs_t, beta) / sizeof(void*)));
  EXPECT_EQ(DFGNN_NUM_INPUTS * sizeof(void*), sizeof(dfgnn_inputs_t));
}

TEST(ModelTable, EdgeFeatures) {
  int32_t logits = -1;
  EXPECT_EQ(inputs_of(DFGNN_MODEL_GAT, 1, &logits), DFGNN_INPUT_H | DFGNN_INPUT_ATT_SRC | DFGNN_INPUT_ATT_DST | DFGNN_INPUT_EDGE);
  EXPECT_EQ(logits, 1) << "GAT's edge input is an [E, H] float32 logit term";
  EXPECT_EQ(inputs_of(DFGNN_MODEL_GATV2, 1, &logits), DFGNN_INPUT_H | DFGNN_INPUT_H_DST | DFGNN_INPUT_ATT_SRC | DFGNN_INPUT_EDGE);
  EXPECT_EQ(logits, 0);
  EXPECT_EQ(inputs_of(DFGNN_MODEL_TRANSFORMER, 1, &logits), DFGNN_INPUT_Q | DFGNN_INPUT_K | DFGNN_INPUT_V | DFGNN_INPUT_EDGE);
  EXPECT_EQ(logits, 0);
  uint32_t mask = 0;
  EXPECT_EQ(dfgnnModelInputs(DFGNN_MODEL_AGNN, 1, &mask, nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("agnn takes no edge features"), std::string::npos)
      << dfgnnGetLastErrorMessage();
}

TEST(ModelTable, BadArgumentsNameTheProblem) {
  uint32_t mask = 0;
  EXPECT_EQ(dfgnnModelInputs(static_cast<dfgnn_model_t>(7), 0, &mask, nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("model 7"), std::string::npos) << dfgnnGetLastErrorMessage();
  EXPECT_EQ(dfgnnModelInputs(DFGNN_MODEL_GAT, 2, &mask, nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("edge_features"), std::string::npos);
  EXPECT_EQ(dfgnnModelInputs(DFGNN_MODEL_GAT, 0, nullptr, nullptr), DFGNN_STATUS_NULL_POINTER);
}

TEST(ModelTable, StateFloats) {
  // NS + NV * D per pass. Forward: acc (NV 1), running max and sum (NS 2), every model. Backward
  // row (RowGrad) and column (1 + ColGrad::NV vectors, ColGrad::NS scalars), variants.cuh.
  using dfgnn::PassKind;
  struct Row {
    dfgnn_model_t model;
    int forward, row, col;  // at D = 10
  };
  for (const Row& r : {Row{DFGNN_MODEL_TRANSFORMER, 12, 10, 20}, Row{DFGNN_MODEL_GAT, 12, 1, 11},
                       Row{DFGNN_MODEL_GATV2, 12, 20, 20}, Row{DFGNN_MODEL_AGNN, 12, 12, 21}}) {
    const dfgnn_op_t op = dfgnnOpDefault(r.model, DFGNN_DTYPE_FLOAT32, 3, 10);
    EXPECT_EQ(dfgnn::state_floats(op, PassKind::Forward), r.forward) << dfgnn::model_name(r.model);
    EXPECT_EQ(dfgnn::state_floats(op, PassKind::BackwardRow), r.row) << dfgnn::model_name(r.model);
    EXPECT_EQ(dfgnn::state_floats(op, PassKind::BackwardCol), r.col) << dfgnn::model_name(r.model);
  }
}

// The names are the model table's (dfgnnModelName); the tools and the Python package take theirs
// from it (test_cli.cpp, tests/python/test_model_names.py).
TEST(ModelTable, NamesRoundTrip) {
  const char* expected[] = {"gat", "gatv2", "transformer", "agnn"};  // dfgnn_model_t order
  ASSERT_EQ(std::size(expected), size_t{DFGNN_NUM_MODELS});
  for (int m = 0; m < DFGNN_NUM_MODELS; ++m) {
    const auto model = static_cast<dfgnn_model_t>(m);
    const char* name = nullptr;
    ASSERT_EQ(dfgnnModelName(model, &name), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
    EXPECT_STREQ(name, expected[m]);
    EXPECT_STREQ(dfgnn::model_name(model), name);
    dfgnn_model_t back = static_cast<dfgnn_model_t>(-1);
    ASSERT_EQ(dfgnnModelFromName(name, &back), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
    EXPECT_EQ(back, model);
  }
}

TEST(ModelTable, BadNamesNameTheModels) {
  dfgnn_model_t model = DFGNN_MODEL_AGNN;
  for (const char* bad : {"resnet", "GAT", "gt", ""}) {
    EXPECT_EQ(dfgnnModelFromName(bad, &model), DFGNN_STATUS_INVALID_ARGUMENT) << bad;
    EXPECT_EQ(std::string(dfgnnGetLastErrorMessage()),
              fmt::format("'{}' is no model (the models are gat, gatv2, transformer, agnn)", bad));
    EXPECT_EQ(model, DFGNN_MODEL_AGNN) << "left as it was";
  }
  EXPECT_EQ(dfgnnModelFromName(nullptr, &model), DFGNN_STATUS_NULL_POINTER);
  EXPECT_EQ(dfgnnModelFromName("gat", nullptr), DFGNN_STATUS_NULL_POINTER);
  const char* name = "unchanged";
  EXPECT_EQ(dfgnnModelName(static_cast<dfgnn_model_t>(DFGNN_NUM_MODELS), &name), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("model 4"), std::string::npos) << dfgnnGetLastErrorMessage();
  EXPECT_STREQ(name, "unchanged");
  EXPECT_EQ(dfgnnModelName(DFGNN_MODEL_GAT, nullptr), DFGNN_STATUS_NULL_POINTER);
  EXPECT_STREQ(dfgnn::model_name(static_cast<dfgnn_model_t>(-1)), "unknown");
}

// DFGNN_MAX_MODEL_INPUTS (the bindings' fixed-arity calls) is the most any model reads.
TEST(ModelTable, MostInputs) {
  int most = 0;
  for (int m = 0; m < DFGNN_NUM_MODELS; ++m)
    for (int32_t edge = 0; edge < 2; ++edge) {
      uint32_t mask = 0;
      if (dfgnnModelInputs(static_cast<dfgnn_model_t>(m), edge, &mask, nullptr) == DFGNN_STATUS_SUCCESS)
        most = std::max(most, std::popcount(mask));
    }
  EXPECT_EQ(most, DFGNN_MAX_MODEL_INPUTS);
}
