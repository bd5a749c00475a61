/* The command-line option engine every program uses (ddprun, ddp-train,
 * ddprun-store, ddprun-store-cli, the benchmarks), and the one set of
 * number parsers they share. A program declares a table of options; the
 * engine reads argv (and, if asked, the environment) by the same rules for
 * all of them, which are argparse's as torchrun uses them:
 *
 *   - a long option is spelled --a-b or --a_b;
 *   - where the program allows it, a long option may be abbreviated to a
 *     unique prefix; a prefix that fits several is an error naming them;
 *   - a value follows as --opt=VALUE or as the next argument, which is not
 *     taken when it looks like an option (so a forgotten value does not
 *     swallow the next flag); short forms take -r3, -r=3 or -r 3;
 *   - an unknown option is an error suggesting the option it most resembles;
 *   - with an environment prefix (ddprun's PET_), PREFIX<NAME> gives an
 *     option's default (NAME: the long name in upper case, '_' for '-'),
 *     and failing that the option's env_also variable; the command line
 *     wins, so a bad variable it overrides is no error;
 *   - parsing stops at the first argument that is not an option (a
 *     program's operand or subcommand), or after "--".
 *
 * Values are gathered first and applied once the whole command line has
 * been read, in the table's order; the last of several occurrences wins.
 * Nothing here exits or prints: errors come back as one line, naming the
 * option and the problem, and the program decides what to do. */
#ifndef DDPRUN_COMMON_OPTS_H
#define DDPRUN_COMMON_OPTS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* The most options one table may hold, and the longest long name. */
#define OPTS_MAX 96
#define OPTS_NAME_MAX 48

/* opts_parse's return value when -h/--help (an OPTS_HELP option) was given,
 * and when --version (an OPTS_VERSION option) was. */
#define OPTS_HELP_GIVEN 1
#define OPTS_VERSION_GIVEN 2

typedef enum {
    /* Flags (no value). On the command line they are on; from the
     * environment the variable holds an integer, 0 for off. */
    OPTS_FLAG,       /* int *target: 1 when on, 0 when off */
    OPTS_FLAG_CLEAR, /* int *target: 0 when on, 1 when off (--no-eval clears eval) */
    /* Options with a value, checked against [lo, hi] (see opts_opt). */
    OPTS_INT,     /* int *target, a whole decimal number */
    OPTS_I64,     /* int64_t *target, a whole decimal number */
    OPTS_SIZE,    /* size_t *target, bytes with an optional K, M or G (see opts_parse_size) */
    OPTS_DOUBLE,  /* double *target, a finite number */
    OPTS_SECONDS, /* double *target, a number of seconds, >= 0 (> 0 with .positive) */
    OPTS_STR,     /* const char **target: the value itself (it points into argv or env) */
    OPTS_BUF,     /* char target[.size]: a copy of the value, which must fit */
    OPTS_CHOICE,  /* int *target: the .value of the .choices entry named by the value */
    OPTS_CALL,    /* .apply(arg) parses and applies the value, for anything else */
    /* Options that are not values. */
    OPTS_HELP,    /* opts_parse returns OPTS_HELP_GIVEN at once */
    OPTS_VERSION, /* opts_parse returns OPTS_VERSION_GIVEN at once */
    OPTS_REFUSED, /* giving it is an error; .help is the message (it is not listed) */
} opts_type;

typedef struct opts_opt opts_opt;

/* One option's value as an OPTS_CALL callback receives it. */
typedef struct {
    const opts_opt *opt;
    const char *src; /* how messages name it: "--nnodes", or "PET_NNODES" */
    const char *val; /* the value ("1" for a flag given on the command line) */
    void *ctx;       /* the spec's ctx */
    char *err;       /* where a message goes (opts_fail writes it) */
    size_t errlen;
} opts_arg;

/* Returns 0, or a negative errno with a message in a->err (opts_fail). */
typedef int (*opts_apply_fn)(const opts_arg *a);

/* A name an OPTS_CHOICE value may take and what it stores; a table of
 * them ends with {NULL, 0}. OPTS_STR and OPTS_BUF may carry one too: then
 * the value must be one of the names. */
typedef struct {
    const char *name;
    int value;
} opts_choice;

struct opts_opt {
    const char *name;  /* the long name, hyphenated ("max-restarts") */
    char short_name;   /* its one-letter form ('r' for -r), or 0 */
    opts_type type;
    void *target;      /* typed options: where the value goes (see opts_type) */
    /* Numbers: the accepted range, both ends included; lo and hi both 0
     * stand for the type's whole range. */
    double lo, hi;
    int positive;      /* OPTS_SECONDS: 0 is refused as well */
    size_t size;       /* OPTS_BUF: the size of the target array */
    const opts_choice *choices;
    opts_apply_fn apply; /* OPTS_CALL */
    /* What a valid value is, for messages ("a port (0 to 65535)"), in place
     * of what the type and range imply ("a whole number from 0 to 65535"). */
    const char *want;
    /* For opts_format_help: the value's name ("N"), the help text (a '\n'
     * in it continues on the next line, indented; NULL: the option is not
     * listed), and a heading to print before this option. */
    const char *metavar;
    const char *help;
    const char *section;
    /* Another variable that gives the default when PREFIX<NAME> is unset
     * (torchrun's own names, TORCHELASTIC_SIGNALS_TO_HANDLE), or NULL. */
    const char *env_also;
};

typedef struct {
    const char *prog;       /* the program's name, for "(see PROG --help)" */
    const opts_opt *opts;   /* the table */
    size_t nopts;           /* at most OPTS_MAX */
    /* "PET_": PET_<NAME> variables give defaults; NULL: none are read. */
    const char *env_prefix;
    char **env;             /* the environment to read them from (NULL: none) */
    /* 1: a unique prefix of a long name stands for it (argparse's
     * allow_abbrev); 0: only whole names, so that a near miss ("--epoch")
     * is reported with a suggestion rather than taken. */
    int abbrev;
    /* 1: the program takes no operands, so one is an error ("unexpected
     * argument"); 0: parsing stops at the first and returns its index. */
    int no_operands;
    void *ctx;              /* handed to OPTS_CALL callbacks */
    /* opts_format_help's column for the help text (to line up with a list
     * the program prints itself); 0: just past the widest option. */
    int help_col;
} opts_spec;

/* Reads argv[1..] up to the first operand, then applies the values found
 * there and in the environment. Sets *next to the index of the first
 * operand (argc when there is none; the argument after "--" when "--"
 * ended the options). Returns 0; OPTS_HELP_GIVEN as soon as -h/--help is
 * seen, OPTS_VERSION_GIVEN as soon as --version is (nothing applied,
 * nothing printed); or a negative errno (-EINVAL for
 * a bad command line, or what a callback returned) with a one-line message
 * in err, without a program-name prefix. Targets of options applied before
 * the failing one may have been written. */
int opts_parse(const opts_spec *spec, int argc, char **argv, int *next, char *err,
               size_t errlen);

/* Writes the options' part of a usage text into buf (always terminated
 * when size > 0): for each option with help text, its heading if any, then
 * "  -r, --redirects V" and the help in a column. Returns the length of the
 * whole text, as snprintf does, so a return >= size means it was cut. */
size_t opts_format_help(const opts_spec *spec, char *buf, size_t size);
/* Prints head, the option listing (opts_format_help) and tail (either may
 * be NULL) to out. 0, or -ENOMEM. */
int opts_print_help(const opts_spec *spec, const char *head, const char *tail, FILE *out);

/* Prints a shell completion script for the program (bash, or zsh through
 * its bash completion layer): every long and short option, the names an
 * option's value may take where the table lists them, and files
 * otherwise. 0, or -EINVAL for a shell it does not know. */
int opts_print_completion(const opts_spec *spec, const char *shell, FILE *out);

/* For callbacks: writes the formatted message into a->err and returns
 * -EINVAL. opts_bad writes "SRC: 'VAL' is not WANT". */
int opts_fail(const opts_arg *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int opts_bad(const opts_arg *a, const char *want);

/* The value of NAME in env (an environ-style array, NULL-terminated; NULL
 * holds nothing), or NULL. Programs that are handed an environment, as
 * opts_spec.env is, read their other variables with it too. */
const char *opts_getenv(char **env, const char *name);

/* The number parsers. Each takes the whole string (trailing characters
 * are an error; leading blanks are skipped, as strtol does), checks errno,
 * and returns 0 with *out set, -EINVAL when s is not such a number, or
 * -ERANGE when it is one outside [lo, hi]; *out is untouched on error. */
int opts_parse_int(const char *s, int lo, int hi, int *out);
int opts_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Bytes: a number (a fraction is allowed) with an optional K, M or G
 * (powers of 1024) and an optional B: "4096", "4K", "1.5MB"; the result
 * must be a whole number of bytes. */
int opts_parse_size(const char *s, size_t lo, size_t hi, size_t *out);
/* A finite number (strtod's syntax; not nan or inf). */
int opts_parse_double(const char *s, double lo, double hi, double *out);
/* A finite number of seconds, at least 0, and above 0 when positive. */
int opts_parse_seconds(const char *s, int positive, double *out);

#endif
