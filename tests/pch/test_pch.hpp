#pragma once
// The headers nearly every test translation unit parses, precompiled once (tests/CMakeLists.txt:
// chl_test_pch, reused by every test executable): parsing them is most of a test's compile time
// (about 5 s a file on CI's two cores, 212 files). Only third-party and standard headers: the
// project's own headers change too often to be worth it, and a test must still include what it
// uses (the precompiled header is an optimization, not an include).
#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <tl/expected.hpp>
#include <vector>
