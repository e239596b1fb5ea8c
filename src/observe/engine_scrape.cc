// The EngineScraper's I/O: the scrape loop (skeleton; the loop lands in a following commit).
#include <boost/asio/io_context.hpp>

#include "observe/engine_stats.h"

namespace ramjet::observe {

struct EngineScraper::Loop {};

EngineScraper::~EngineScraper() { stop(); }

void EngineScraper::start(boost::asio::io_context&) {}

void EngineScraper::stop() {}

void EngineScraper::write_metrics(Exposition&) const {}

}  // namespace ramjet::observe
