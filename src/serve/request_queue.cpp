#include "serve/request_queue.h"

namespace fp8rl::serve {

void Channel::push(TokenEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

void Channel::fail(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = message;
  }
  ready_.notify_all();
}

std::optional<TokenEvent> Channel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty() || error_.has_value(); });
  if (events_.empty() || error_) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<std::string> Channel::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

std::shared_ptr<Channel> RequestQueue::submit(std::vector<GenerationRequest> requests,
                                              Release release) {
  auto channel = std::make_shared<Channel>();
  {
    std::lock_guard lock(mutex_);
    if (stop_) {
      channel->fail("the server is shutting down");
      return channel;
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const int64_t id = next_id_++;
      Route route;
      route.channel = channel;
      route.part = int(i);
      route.release = release;
      route.samples_left = requests[i].params.n;
      route.sent.assign(size_t(requests[i].params.n), 0);
      channel->ids_.push_back(id);
      submitted_.push_back({{id, std::move(requests[i])}, std::move(route)});
    }
  }
  wake_.notify_all();
  return channel;
}

void RequestQueue::abort(const Channel& channel) {
  {
    std::lock_guard lock(mutex_);
    aborted_.insert(aborted_.end(), channel.ids_.begin(), channel.ids_.end());
  }
  wake_.notify_all();
}

void RequestQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
}

bool RequestQueue::poll(bool idle, int64_t live_sequences, std::vector<Arrival>& arrived,
                        std::vector<int64_t>& aborted) {
  live_sequences_ = live_sequences;
  std::unique_lock lock(mutex_);
  // Idle, the engine waits here; a signal is noticed within the wait's period.
  while (idle && submitted_.empty() && aborted_.empty() && !stop_ && !signal_.requested())
    wake_.wait_for(lock, std::chrono::milliseconds(100));
  if (signal_.requested()) stop_ = true;
  for (Submitted& s : submitted_) {
    routes_.emplace(s.arrival.first, std::move(s.route));
    arrived.push_back(std::move(s.arrival));
  }
  submitted_.clear();
  for (int64_t id : aborted_)
    if (routes_.erase(id) != 0) {
      aborted.push_back(id);
      ++aborted_requests_;
    }
  aborted_.clear();
  live_requests_ = int64_t(routes_.size());
  return !stop_;
}

void RequestQueue::on_token(int64_t id, int sample, const CompletionOutput& out, bool done) {
  auto it = routes_.find(id);
  if (it == routes_.end()) return;  // aborted meanwhile
  Route& r = it->second;
  TokenEvent e;
  e.part = r.part;
  e.sample = sample;
  e.token = out.ids.back();
  e.logprob = out.logprobs.back();
  if (!out.processed_logprobs.empty()) e.processed_logprob = out.processed_logprobs.back();
  if (!out.top_logprobs.empty()) e.top = out.top_logprobs.back();
  e.done = done;
  e.finish = out.finish;
  size_t& sent = r.sent[size_t(sample)];
  size_t release_to = out.text.size();
  if (!done)
    release_to = r.release.hold_all || out.text.size() < r.release.holdback
                     ? 0
                     : out.text.size() - r.release.holdback;
  if (release_to > sent) {
    e.text = out.text.substr(sent, release_to - sent);
    sent = release_to;
  }
  r.channel->push(std::move(e));
  if (done && --r.samples_left == 0) routes_.erase(it);
  live_requests_ = int64_t(routes_.size());
}

void RequestQueue::on_rejected(int64_t id, const std::string& message) {
  auto it = routes_.find(id);
  if (it == routes_.end()) return;
  it->second.channel->fail(message);
  routes_.erase(it);
  live_requests_ = int64_t(routes_.size());
}

void RequestQueue::fail_all(const std::string& message) {
  std::lock_guard lock(mutex_);
  stop_ = true;
  for (auto& [id, r] : routes_) r.channel->fail(message);
  routes_.clear();
  for (Submitted& s : submitted_) s.route.channel->fail(message);
  submitted_.clear();
  live_requests_ = 0;
}

}  // namespace fp8rl::serve
