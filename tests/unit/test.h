/* A minimal unit-test harness: TEST(name) registers a function; the runner
 * (test_main.c) starts each test in its own process with a timeout and
 * prints one line per test ("ok", "FAIL" or "skip"), so a crash or a hang
 * in one test cannot take the others down. */
#ifndef DDPRUN_TESTS_UNIT_TEST_H
#define DDPRUN_TESTS_UNIT_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);

void test_register(const char *name, test_fn fn, const char *file);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
void test_skip(const char *why) __attribute__((noreturn));
/* A scratch directory private to the running test (removed afterwards). */
const char *test_tmpdir(void);
/* test_tmpdir()/name, in one of four rotating buffers (so a few can be in
 * use at once). */
const char *test_path(const char *name);
/* Until test_stderr_end(), stderr goes to a memory file; that returns what
 * was written to it (the caller frees it). Not nested. */
void test_stderr_begin(void);
char *test_stderr_end(void);

#define TEST(name)                                                        \
    static void name(void);                                               \
    __attribute__((constructor)) static void test_reg_##name(void) {      \
        test_register(#name, name, __FILE__);                             \
    }                                                                     \
    static void name(void)

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);   \
    } while (0)

#define CHECK_EQ(a, b)                                                    \
    do {                                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);               \
        if (a_ != b_)                                                     \
            test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
                      #a, a_, #b, b_);                                    \
    } while (0)

#define CHECK_MEM(p, n, q, m)                                             \
    do {                                                                  \
        size_t n_ = (size_t)(n), m_ = (size_t)(m);                        \
        if (n_ != m_ || memcmp((p), (q), n_) != 0)                        \
            test_fail(__FILE__, __LINE__, "%s (%zu bytes) differs from %s (%zu bytes)", \
                      #p, n_, #q, m_);                                    \
    } while (0)

#define CHECK_STR(a, b) CHECK_MEM((a), strlen(a), (b), strlen(b))

#endif
