// Test support for the strategies' own tests: a plan as the connector resolves it on this host's CPU, and a test that
// runs itself as the ranks of a run (real processes meeting through c10d's TCPStore, on Gloo).
//
//   TEST(DdpStrategyTest, AveragesGradients) {
//     if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
//     ... this rank's part: strategy_testing::ThisRankPlan("ddp") ...
//   }
//
// The test itself starts the test binary again once per rank, filtered to the same test, with the rank in the
// environment (KILN_STRATEGY_TEST_RANK, _WORLD, _PORT); a rank's failed expectations fail its exit status, and the
// test fails with every rank's output. Test-only; thread-compatible.
#ifndef KILN_TRAINER_STRATEGIES_TESTING_STRATEGY_RANKS_H_
#define KILN_TRAINER_STRATEGIES_TESTING_STRATEGY_RANKS_H_

#include <string>

#include "connector/plan.h"

namespace kiln::strategy_testing {

// Whether this process is one rank of RunThisTestAsRanks (not the test that started them).
bool IsRank();
int Rank();       // This rank's number (0 in the test itself).
int WorldSize();  // The ranks' number (1 in the test itself).

// Starts the current test again as `world` processes and waits for them (within 4/5 of the test's time limit):
// adds a gtest failure naming each rank that failed, with its output.
void RunThisTestAsRanks(int world);

// The plan ResolvePlan gives `strategy` on the CPU for this rank, as Lightning's environment variables place it
// (MASTER_ADDR, MASTER_PORT, LOCAL_RANK, NODE_RANK, set here), with `WorldSize()` devices. In the test itself: one
// device. Fails the test (and returns an empty plan) when resolving fails.
Plan ThisRankPlan(const std::string& strategy);

}  // namespace kiln::strategy_testing

#endif  // KILN_TRAINER_STRATEGIES_TESTING_STRATEGY_RANKS_H_
