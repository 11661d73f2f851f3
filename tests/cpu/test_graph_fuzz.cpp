// placeholder, replaced below
#include <gtest/gtest.h>
TEST(GraphFuzz, Placeholder) {}
