// The owner of the tests' precompiled header (test_pch.hpp): an empty translation unit.
