#include "base/env.h"

#include <gtest/gtest.h>

namespace ember::env {

TEST(Env, ParsesByteSizes) {
    EXPECT_EQ(*parse_bytes("1024"), 1024u);
    EXPECT_EQ(*parse_bytes("8GiB"), 8ull << 30);
    EXPECT_EQ(*parse_bytes("512MiB"), 512ull << 20);
    EXPECT_EQ(*parse_bytes("1.5G"), 3ull << 29);
    EXPECT_EQ(*parse_bytes(" 64 kb"), 64ull << 10);
}

TEST(Env, RejectsBadSizes) {
    EXPECT_FALSE(parse_bytes("").ok());
    EXPECT_FALSE(parse_bytes("GiB").ok());
    auto bad = parse_bytes("12parsecs");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("PARSECS"), std::string::npos);
}

}  // namespace ember::env
