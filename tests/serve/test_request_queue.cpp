// The feed between handler threads and the engine: what a channel releases of each token's
// text, holding back what could begin a stop string (which the engine cuts off) or, for a
// request with tools, everything until the choice ends; aborts reach the engine.
#include <gtest/gtest.h>

#include "serve/request_queue.h"

using namespace fp8rl;
using namespace fp8rl::serve;

namespace {

GenerationRequest request(int n) {
  GenerationRequest g;
  g.prompt_ids = {1, 2};
  g.params.n = n;
  return g;
}

// Hands the engine what was submitted; returns the ids it got.
std::vector<int64_t> admit(RequestQueue& q) {
  std::vector<RequestFeed::Arrival> arrived;
  std::vector<int64_t> aborted;
  EXPECT_TRUE(q.poll(false, 0, arrived, aborted));
  std::vector<int64_t> ids;
  for (const auto& a : arrived) ids.push_back(a.first);
  return ids;
}

// The texts a channel releases for successive cumulative outputs.
std::vector<std::string> released(Release release, const std::vector<std::string>& texts,
                                  const std::string& final_text) {
  RequestQueue q{StopRequest()};
  auto channel = q.submit({request(1)}, release);
  const int64_t id = admit(q).at(0);
  CompletionOutput out;
  for (const std::string& t : texts) {
    out.ids.push_back(7);
    out.logprobs.push_back(-1.0f);
    out.text = t;
    q.on_token(id, 0, out, false);
  }
  out.ids.push_back(8);
  out.logprobs.push_back(-2.0f);
  out.text = final_text;
  out.finish = FinishReason::stop;
  q.on_token(id, 0, out, true);
  std::vector<std::string> got;
  while (auto e = channel->pop(std::chrono::milliseconds(0))) got.push_back(e->text);
  return got;
}

TEST(RequestQueue, HoldsBackWhatMayBeginAStopString) {
  // The stop string "END" (holdback 2): "abE" releases "a", "abEN" "b", then "END" completes
  // and the engine cuts the text to "ab": nothing of the stop string ever went out.
  Release r;
  r.holdback = 2;
  EXPECT_EQ(released(r, {"a", "abE", "abEN"}, "ab"), (std::vector<std::string>{"", "a", "b", ""}));
  // Negative control: without a holdback the partial stop string is released at once.
  EXPECT_EQ(released(Release{}, {"a", "abE", "abEN"}, "ab"),
            (std::vector<std::string>{"a", "bE", "N", ""}));
}

TEST(RequestQueue, HoldAllReleasesAtTheEnd) {
  Release r;
  r.hold_all = true;
  EXPECT_EQ(released(r, {"<tool", "<tool_call>"}, "<tool_call>{}</tool_call>"),
            (std::vector<std::string>{"", "", "<tool_call>{}</tool_call>"}));
}

TEST(RequestQueue, AbortReachesTheEngineAndStopEndsIt) {
  RequestQueue q{StopRequest()};
  auto a = q.submit({request(2), request(1)}, Release{});
  auto b = q.submit({request(1)}, Release{});
  const std::vector<int64_t> ids = admit(q);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(q.live_requests(), 3);
  q.abort(*a);
  std::vector<RequestFeed::Arrival> arrived;
  std::vector<int64_t> aborted;
  EXPECT_TRUE(q.poll(false, 5, arrived, aborted));
  EXPECT_EQ(aborted, (std::vector<int64_t>{ids[0], ids[1]}));
  EXPECT_EQ(q.aborted_requests(), 2);
  EXPECT_EQ(q.live_requests(), 1);
  EXPECT_EQ(q.live_sequences(), 5);
  // An aborted request's late tokens go nowhere.
  CompletionOutput out;
  out.ids = {1};
  out.logprobs = {0};
  q.on_token(ids[0], 0, out, false);
  EXPECT_FALSE(a->pop(std::chrono::milliseconds(0)).has_value());
  q.stop();
  aborted.clear();
  EXPECT_FALSE(q.poll(true, 0, arrived, aborted));
  q.fail_all("the server is shutting down");
  EXPECT_EQ(b->error(), "the server is shutting down");
  EXPECT_EQ(q.submit({request(1)}, Release{})->error(), "the server is shutting down");
}

}  // namespace
