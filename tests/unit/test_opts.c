/* Unit tests of the option engine every program uses (common/opts.c):
 * finding options (unique prefixes, --a_b, short forms), values (=VALUE,
 * the next argument, missing ones), suggestions for unknown options,
 * environment defaults that the command line overrides, where parsing
 * stops, typed targets and their messages, callbacks, the number parsers
 * and the help listing. One small table stands for a program. */
#include "common/opts.h"
#include "tests/unit/test.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>

/* A command line: ARGS("--count", "2") is argv with a program name. */
#define ARGS(...) ((char *[]){"prog", __VA_ARGS__, NULL})

/* What the table below fills in. */
typedef struct {
    int count, verbose, cache, level;
    int64_t big;
    size_t bytes;
    double ratio, wait;
    const char *name;
    char label[8];
    char seen_src[64], seen_val[64]; /* what the callback was given */
} target;

static const opts_choice levels[] = {{"low", 1}, {"mid", 2}, {"high", 3}, {NULL, 0}};

/* --mode: a callback that records its source and value, and refuses "bad". */
static int apply_mode(const opts_arg *a) {
    target *t = a->ctx;
    if (strcmp(a->val, "bad") == 0) return opts_bad(a, "a good mode");
    snprintf(t->seen_src, sizeof t->seen_src, "%s", a->src);
    snprintf(t->seen_val, sizeof t->seen_val, "%s", a->val);
    return 0;
}

typedef struct {
    target t;
    opts_opt table[16];
    opts_spec spec;
    char err[512];
    int next;
} fixture;

/* A program's table: every kind of option, with abbreviations as given. */
static void fixture_init(fixture *f, int abbrev, char **env) {
    memset(f, 0, sizeof *f);
    target *t = &f->t;
    const opts_opt table[] = {
        {"max-count", 'n', OPTS_INT, .target = &t->count, .lo = 1, .hi = 10, .metavar = "N",
         .section = "Counting:", .help = "how many (default 0)"},
        {"max-bytes", 0, OPTS_SIZE, .target = &t->bytes, .lo = 0, .hi = 1 << 20, .metavar = "B",
         .help = "a size"},
        {"big", 0, OPTS_I64, .target = &t->big, .lo = 0, .hi = INT64_MAX},
        {"verbose", 'v', OPTS_FLAG, .target = &t->verbose, .help = "say more\nand more"},
        {"no-cache", 0, OPTS_FLAG_CLEAR, .target = &t->cache, .help = "no cache"},
        {"ratio", 0, OPTS_DOUBLE, .target = &t->ratio, .lo = 0, .hi = 1, .metavar = "X",
         .section = "Tuning:", .help = "a ratio"},
        {"wait", 0, OPTS_SECONDS, .target = &t->wait, .positive = 1, .metavar = "S"},
        {"name", 0, OPTS_STR, .target = &t->name, .metavar = "NAME", .help = "a name"},
        {"label", 0, OPTS_BUF, .target = t->label, .size = sizeof t->label},
        {"level", 0, OPTS_CHOICE, .target = &t->level, .choices = levels, .metavar = "L",
         .help = "low, mid or high"},
        {"mode", 'm', OPTS_CALL, .apply = apply_mode, .metavar = "fast|slow|very-slow|other",
         .help = "a mode, whose long form sits alone"},
        {"port", 0, OPTS_INT, .target = &t->count, .lo = 0, .hi = 65535,
         .want = "a port (0 to 65535)"},
        {"old-flag", 0, OPTS_REFUSED, .help = "--old-flag is gone; drop it"},
        {"help", 'h', .type = OPTS_HELP, .help = "print this help"},
    };
    memcpy(f->table, table, sizeof table);
    t->cache = 1;
    f->spec = (opts_spec){.prog = "prog", .opts = f->table,
                          .nopts = sizeof table / sizeof table[0], .env_prefix = "PROG_",
                          .env = env, .abbrev = abbrev, .ctx = t};
}

static int parse(fixture *f, char **argv) {
    int argc = 0;
    while (argv[argc]) argc++;
    return opts_parse(&f->spec, argc, argv, &f->next, f->err, sizeof f->err);
}

/* Parses a command line that must fail, and checks the whole message. */
#define CHECK_FAILS(f, argv, want)                                                       \
    do {                                                                                 \
        CHECK_EQ(parse((f), (argv)), -EINVAL);                                           \
        if (strcmp((f)->err, (want)) != 0)                                               \
            test_fail(__FILE__, __LINE__, "message '%s', expected '%s'", (f)->err, (want)); \
    } while (0)

TEST(opts_unique_prefix_stands_for_the_option) {
    fixture f;
    fixture_init(&f, 1, NULL);
    CHECK_EQ(parse(&f, ARGS("--max-c", "3", "--verb", "--rat=0.5")), 0);
    CHECK_EQ(f.t.count, 3);
    CHECK_EQ(f.t.verbose, 1);
    CHECK(f.t.ratio == 0.5);
    /* An exact name wins over the longer names it is a prefix of. */
    fixture_init(&f, 1, NULL);
    CHECK_EQ(parse(&f, ARGS("--name", "x")), 0);
    CHECK_STR(f.t.name, "x");
}

TEST(opts_ambiguous_prefix_names_every_candidate) {
    fixture f;
    fixture_init(&f, 1, NULL);
    CHECK_FAILS(&f, ARGS("--max=3"),
                "option '--max' is ambiguous: it could be --max-count, --max-bytes");
}

TEST(opts_without_abbreviations_a_prefix_is_unknown_with_a_suggestion) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_FAILS(&f, ARGS("--verb"), "unknown option '--verb' (did you mean --verbose?)");
    CHECK_FAILS(&f, ARGS("--max-c", "3"), "unknown option '--max-c' (did you mean --max-count?)");
    CHECK_EQ(parse(&f, ARGS("--verbose")), 0);
}

TEST(opts_underscore_spelling_is_the_same_option) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_EQ(parse(&f, ARGS("--max_count", "4", "--no_cache")), 0);
    CHECK_EQ(f.t.count, 4);
    CHECK_EQ(f.t.cache, 0);
    /* Messages name the option by its own spelling. */
    CHECK_FAILS(&f, ARGS("--max_count=11"), "--max-count: '11' is not a whole number from 1 to 10");
}

TEST(opts_value_follows_an_equals_sign_or_comes_next) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_EQ(parse(&f, ARGS("--name=a=b", "--label", "-")), 0);
    CHECK_STR(f.t.name, "a=b");
    CHECK_STR(f.t.label, "-");
    /* An empty value after '=' is a value. */
    CHECK_EQ(parse(&f, ARGS("--name=")), 0);
    CHECK_STR(f.t.name, "");
    /* Short forms: attached, after '=', or next; a negative number is a value. */
    CHECK_EQ(parse(&f, ARGS("-n7")), 0);
    CHECK_EQ(f.t.count, 7);
    CHECK_EQ(parse(&f, ARGS("-n=8", "-v")), 0);
    CHECK_EQ(f.t.count, 8);
    CHECK_EQ(parse(&f, ARGS("-m", "fast")), 0);
    CHECK_STR(f.t.seen_val, "fast");
    CHECK_FAILS(&f, ARGS("-n", "-2"), "--max-count: '-2' is not a whole number from 1 to 10");
}

TEST(opts_missing_value_is_an_error_and_does_not_swallow_the_next_option) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_FAILS(&f, ARGS("--name"), "--name expects a value");
    CHECK_FAILS(&f, ARGS("--name", "--verbose"),
                "--name expects a value (write --name=VALUE for a value that starts with '-')");
    CHECK_EQ(f.t.verbose, 0);
    CHECK_FAILS(&f, ARGS("-n"), "--max-count expects a value");
}

TEST(opts_flags_take_no_value) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_FAILS(&f, ARGS("--verbose=1"), "--verbose takes no value (got '1')");
    CHECK_FAILS(&f, ARGS("-vx"), "unknown option '-vx' (see prog --help)");
}

TEST(opts_unknown_option_suggests_the_nearest) {
    fixture f;
    fixture_init(&f, 1, NULL);
    CHECK_FAILS(&f, ARGS("--verbsoe"), "unknown option '--verbsoe' (did you mean --verbose?)");
    CHECK_FAILS(&f, ARGS("--lable=x"), "unknown option '--lable' (did you mean --label?)");
    /* Two neighbours swapped are one edit, even in a short name. */
    CHECK_FAILS(&f, ARGS("--prot", "1"), "unknown option '--prot' (did you mean --port?)");
    CHECK_FAILS(&f, ARGS("--max-counts", "2"),
                "unknown option '--max-counts' (did you mean --max-count?)");
    CHECK_FAILS(&f, ARGS("-verbose"), "unknown option '-verbose' (did you mean --verbose?)");
    CHECK_FAILS(&f, ARGS("--xyzzy"), "unknown option '--xyzzy' (see prog --help)");
    CHECK_FAILS(&f, ARGS("-x"), "unknown option '-x' (see prog --help)");
}

TEST(opts_environment_gives_defaults_and_the_command_line_wins) {
    char *env[] = {"PROG_MAX_COUNT=5", "PROG_NAME=from-env", "PROG_RATIO=bad",
                   "PROG_VERBOSE=1", "PROG_NO_CACHE=0", "PROG_LABEL=", "OTHER=1", NULL};
    fixture f;
    fixture_init(&f, 0, env);
    /* PROG_RATIO is bad, but the command line overrides it: no error. */
    CHECK_EQ(parse(&f, ARGS("--name", "from-argv", "--ratio", "0.25", "-m", "x")), 0);
    CHECK_EQ(f.t.count, 5);
    CHECK_STR(f.t.name, "from-argv");
    CHECK(f.t.ratio == 0.25);
    CHECK_EQ(f.t.verbose, 1);
    CHECK_EQ(f.t.cache, 1); /* PROG_NO_CACHE=0: the flag is off */
    CHECK_STR(f.t.label, "");
    CHECK_STR(f.t.seen_src, "--mode"); /* the option's name, however it was typed */
    /* Left alone, the bad variable is an error that names it. */
    fixture_init(&f, 0, env);
    CHECK_FAILS(&f, ARGS("x"), "PROG_RATIO: 'bad' is not a number from 0 to 1");
}

TEST(opts_environment_flags_are_integers_and_callbacks_see_the_variable) {
    char *bad_flag[] = {"PROG_VERBOSE=yes", NULL};
    char *mode[] = {"PROG_MODE=quick", NULL};
    fixture f;
    fixture_init(&f, 0, bad_flag);
    CHECK_FAILS(&f, ARGS("x"), "PROG_VERBOSE: 'yes' is not 0 or 1");
    fixture_init(&f, 0, mode);
    CHECK_EQ(parse(&f, ARGS("x")), 0);
    CHECK_STR(f.t.seen_src, "PROG_MODE");
    CHECK_STR(f.t.seen_val, "quick");
    /* Without a prefix the environment is not read. */
    fixture_init(&f, 0, mode);
    f.spec.env_prefix = NULL;
    CHECK_EQ(parse(&f, ARGS("x")), 0);
    CHECK_STR(f.t.seen_src, "");
}

TEST(opts_parsing_stops_at_the_first_operand_or_after_double_dash) {
    fixture f;
    fixture_init(&f, 0, NULL);
    char **argv = ARGS("-v", "run", "--bogus", "--max-count", "99");
    CHECK_EQ(parse(&f, argv), 0);
    CHECK_EQ(f.next, 2);
    CHECK_EQ(f.t.count, 0);
    CHECK_EQ(parse(&f, ARGS("--verbose", "--", "--bogus")), 0);
    CHECK_EQ(f.next, 3);
    CHECK_EQ(parse(&f, ARGS("-n", "2", "-")), 0);
    CHECK_EQ(f.next, 3);
    CHECK_EQ(parse(&f, ARGS("-v")), 0);
    CHECK_EQ(f.next, 2);
    f.spec.no_operands = 1;
    CHECK_FAILS(&f, ARGS("-v", "run"), "unexpected argument 'run' (see prog --help)");
}

TEST(opts_help_and_refused_options) {
    fixture f;
    fixture_init(&f, 0, NULL);
    /* Help wins over what follows it and over bad values given before it. */
    CHECK_EQ(parse(&f, ARGS("--max-count", "99", "--help", "--bogus")), OPTS_HELP_GIVEN);
    CHECK_EQ(parse(&f, ARGS("-h")), OPTS_HELP_GIVEN);
    CHECK_EQ(f.t.count, 0);
    CHECK_FAILS(&f, ARGS("--old-flag"), "--old-flag is gone; drop it");
}

TEST(opts_values_apply_after_reading_and_the_last_one_wins) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_EQ(parse(&f, ARGS("-n", "2", "--max-count=3", "--level", "high")), 0);
    CHECK_EQ(f.t.count, 3);
    CHECK_EQ(f.t.level, 3);
    /* A callback's refusal is the parse's error. */
    CHECK_FAILS(&f, ARGS("--mode", "bad", "--verbose"), "--mode: 'bad' is not a good mode");
}

TEST(opts_typed_targets_say_what_they_accept) {
    fixture f;
    fixture_init(&f, 0, NULL);
    CHECK_FAILS(&f, ARGS("--max-count", "2.5"),
                "--max-count: '2.5' is not a whole number from 1 to 10");
    CHECK_FAILS(&f, ARGS("--big", "-1"), "--big: '-1' is not a non-negative integer");
    CHECK_FAILS(&f, ARGS("--big", "99999999999999999999"),
                "--big: '99999999999999999999' is not a non-negative integer");
    CHECK_FAILS(&f, ARGS("--ratio", "1.5"), "--ratio: '1.5' is not a number from 0 to 1");
    CHECK_FAILS(&f, ARGS("--ratio", "nan"), "--ratio: 'nan' is not a number from 0 to 1");
    CHECK_FAILS(&f, ARGS("--wait", "0"), "--wait: '0' is not a positive number of seconds");
    CHECK_FAILS(&f, ARGS("--level", "max"), "--level: 'max' is not low, mid or high");
    CHECK_FAILS(&f, ARGS("--port", "70000"), "--port: '70000' is not a port (0 to 65535)");
    CHECK_FAILS(&f, ARGS("--label", "12345678"),
                "--label: '12345678' is too long (at most 7 characters)");
    CHECK_FAILS(&f, ARGS("--max-bytes", "2M"),
                "--max-bytes: '2M' is not a size from 0 to 1048576 bytes (K, M or G may follow)");
    CHECK_EQ(parse(&f, ARGS("--max-bytes", "1.5K", "--label", "1234567", "--wait", "0.5",
                            "--big", "9000000000")), 0);
    CHECK_EQ(f.t.bytes, 1536);
    CHECK_STR(f.t.label, "1234567");
    CHECK(f.t.wait == 0.5);
    CHECK_EQ(f.t.big, 9000000000LL);
}

TEST(opts_number_parsers_take_whole_strings_within_range) {
    int i = -7;
    int64_t l = 0;
    CHECK_EQ(opts_parse_int("42", 0, 100, &i), 0);
    CHECK_EQ(i, 42);
    CHECK_EQ(opts_parse_int("-3", -5, 5, &i), 0);
    CHECK_EQ(i, -3);
    CHECK_EQ(opts_parse_int("42x", 0, 100, &i), -EINVAL);
    CHECK_EQ(opts_parse_int("", 0, 100, &i), -EINVAL);
    CHECK_EQ(opts_parse_int("0x10", 0, 100, &i), -EINVAL);
    CHECK_EQ(opts_parse_int("101", 0, 100, &i), -ERANGE);
    CHECK_EQ(opts_parse_int("99999999999", INT_MIN, INT_MAX, &i), -ERANGE);
    CHECK_EQ(i, -3); /* untouched on error */
    CHECK_EQ(opts_parse_i64("9223372036854775807", 0, INT64_MAX, &l), 0);
    CHECK_EQ(l, INT64_MAX);
    CHECK_EQ(opts_parse_i64("9223372036854775808", 0, INT64_MAX, &l), -ERANGE);
}

TEST(opts_size_double_and_seconds_parsers) {
    size_t z = 0;
    double d = 0;
    CHECK_EQ(opts_parse_size("4K", 0, SIZE_MAX, &z), 0);
    CHECK_EQ(z, 4096);
    CHECK_EQ(opts_parse_size("128MB", 0, SIZE_MAX, &z), 0);
    CHECK_EQ(z, (size_t)128 << 20);
    CHECK_EQ(opts_parse_size("1g", 0, SIZE_MAX, &z), 0);
    CHECK_EQ(z, (size_t)1 << 30);
    CHECK_EQ(opts_parse_size("100b", 0, SIZE_MAX, &z), 0);
    CHECK_EQ(z, 100);
    CHECK_EQ(opts_parse_size("0.3K", 0, SIZE_MAX, &z), -EINVAL); /* 307.2 bytes */
    CHECK_EQ(opts_parse_size("-1", 0, SIZE_MAX, &z), -EINVAL);
    CHECK_EQ(opts_parse_size("1e3", 0, SIZE_MAX, &z), -EINVAL);
    CHECK_EQ(opts_parse_size("4KK", 0, SIZE_MAX, &z), -EINVAL);
    CHECK_EQ(opts_parse_size("3", 4, 8, &z), -ERANGE);
    CHECK_EQ(opts_parse_size("99999999999G", 0, SIZE_MAX, &z), -ERANGE);
    CHECK_EQ(opts_parse_double("2.5e-1", 0, 1, &d), 0);
    CHECK(d == 0.25);
    CHECK_EQ(opts_parse_double("inf", -1e300, 1e300, &d), -EINVAL);
    CHECK_EQ(opts_parse_double("1e999", 0, 1, &d), -ERANGE);
    CHECK_EQ(opts_parse_double("0.5s", 0, 1, &d), -EINVAL);
    CHECK_EQ(opts_parse_seconds("0", 0, &d), 0);
    CHECK(d == 0);
    CHECK_EQ(opts_parse_seconds("0", 1, &d), -ERANGE);
    CHECK_EQ(opts_parse_seconds("-1", 0, &d), -ERANGE);
    CHECK_EQ(opts_parse_seconds("2.5", 1, &d), 0);
    CHECK(d == 2.5);
}

TEST(opts_help_lists_every_option_with_help_in_one_column) {
    fixture f;
    fixture_init(&f, 0, NULL);
    char text[2048];
    size_t n = opts_format_help(&f.spec, text, sizeof text);
    CHECK_EQ(n, strlen(text));
    const char *want =
        "Counting:\n"
        "  -n, --max-count N  how many (default 0)\n"
        "  --max-bytes B      a size\n"
        "  -v, --verbose      say more\n"
        "                     and more\n"
        "  --no-cache         no cache\n"
        "\n"
        "Tuning:\n"
        "  --ratio X          a ratio\n"
        "  --name NAME        a name\n"
        "  --level L          low, mid or high\n"
        "  -m, --mode fast|slow|very-slow|other\n"
        "                     a mode, whose long form sits alone\n"
        "  -h, --help         print this help\n";
    if (strcmp(text, want) != 0)
        test_fail(__FILE__, __LINE__, "help:\n%s\nexpected:\n%s", text, want);
    /* Cut short, it still ends in a terminator and says how long it is. */
    char small[16];
    CHECK_EQ(opts_format_help(&f.spec, small, sizeof small), n);
    CHECK_EQ(strlen(small), sizeof small - 1);
    f.spec.help_col = 24;
    n = opts_format_help(&f.spec, text, sizeof text);
    CHECK(strstr(text, "\n  --ratio X             a ratio\n") != NULL);
}
