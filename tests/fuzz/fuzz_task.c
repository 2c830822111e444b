/* Fuzz harness for the benchmark readers (src/eval/task_read_*.c): every
 * input, read as each task kind, must either be refused with a message
 * that names the input, or give items that hold together: 1..16 choices,
 * a label among them, every context and continuation a non-empty string
 * without NUL (its bytes are then tokenized), contexts and continuations
 * readable to their end; few-shot prompts built from them keep all that.
 * The first byte picks PIQA's labels (none, "0\n1\n", "1\n"). The same
 * bytes as a custom eval file (src/eval/custom_read.c): refused naming the
 * input, or items whose prompt is non-empty and whose expectation fits
 * their match kind.
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over built-in seeds, so CI exercises it too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit.h"

static void fail(const char *what, const char *input)
{
    fprintf(stderr, "fuzz_task: %s for input '%.200s'\n", what, input);
    abort();
}

static void check_task(const lb_task *t, const char *input)
{
    for (size_t i = 0; i < lb_task_size(t); i++) {
        lb_task_item it;
        if (lb_task_get(t, i, &it) != LB_OK) fail("lb_task_get failed", input);
        if (it.n_choices < 1 || it.n_choices > LB_TASK_MAX_CHOICES || it.label >= it.n_choices) fail("bad item shape", input);
        if (!it.preamble || !it.group) fail("NULL preamble or group", input);
        for (uint32_t c = 0; c < it.n_choices; c++)
            if (!it.context[c] || !it.context[c][0] || !it.continuation[c] || !it.continuation[c][0])
                fail("an empty context or continuation", input);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const labels[] = {NULL, "0\n1\n", "1\n"};
    const char *lab = size ? labels[data[0] % 3] : NULL;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    for (int k = LB_TASK_HELLASWAG; k <= LB_TASK_MC; k++) {
        lb_task *t = NULL;
        const char *pl = k == LB_TASK_PIQA ? (lab ? lab : "") : lab;
        if (lb_task_parse((lb_task_kind)k, text, size, pl, pl ? strlen(pl) : 0, "fuzz_test.csv", NULL, &t) != LB_OK) {
            if (t) fail("refused but returned a task", text);
            if (!strstr(lb_last_error(), "fuzz_test.csv")) fail("refused without naming the input", text);
            continue;
        }
        check_task(t, text);
        if (lb_task_size(t) > 1 && lb_task_fewshot(t, t, 1, 7) == LB_OK) check_task(t, text);
        lb_task_free(t);
    }
    /* the same bytes as a custom eval file */
    lb_custom *c = NULL;
    if (lb_custom_parse(text, size, "fuzz_test.csv", &c) != LB_OK) {
        if (c) fail("custom: refused but returned items", text);
        if (!strstr(lb_last_error(), "fuzz_test.csv")) fail("custom: refused without naming the input", text);
    } else {
        for (size_t i = 0; i < lb_custom_size(c); i++) {
            lb_custom_item it;
            if (lb_custom_get(c, i, &it) != LB_OK || !it.prompt || !it.prompt[0] || !it.id) fail("custom: bad item", text);
            if ((it.match == LB_MATCH_CHOICES) != (it.expected == NULL)) fail("custom: expected vs choices", text);
            if (it.match == LB_MATCH_CHOICES && (it.n_choices < 2 || it.label >= it.n_choices)) fail("custom: choices", text);
        }
        lb_custom_free(c);
    }
    free(text);
    return 0;
}

#ifndef LB_LIBFUZZER
static const char *const seeds[] = {
    "Roof shingle removal: A man is sitting on a roof. he\n3\nis using wrap.\nis ripping tiles.\nis holding a cube.\nstarts pulling.\n",
    "{\"activity_label\": \"A\", \"ctx_a\": \"[title] b.\", \"ctx_b\": \"c\", \"endings\": [\"x [step] y\", \"z\"], \"label\": \"1\"}\n",
    "{\"text\": \"the quick brown fox\"}\n{\"text\": \"jumps over\"}\n",
    "{\"question\": {\"stem\": \"Q?\", \"choices\": [{\"text\": \"a\", \"label\": \"A\"}, {\"text\": \"b\", \"label\": \"B\"}]}, \"answerKey\": \"B\"}\n",
    "\"What, is \"\"it\"\"?\nyes\",1,2,3,4,C\r\nq,a,b,c,d,A\n",
    "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n{\"goal\": \"h\", \"sol1\": \"c\", \"sol2\": \"d\"}\n",
    "{\"sentence\": \"A is taller than B so _ won.\", \"option1\": \"A\", \"option2\": \"B\", \"answer\": \"2\"}\n",
    "{\"context\": \"c\", \"choices\": [\"a\", \"b\", \"c\"], \"label\": 2}\n{\"context\": \"d\", \"choices\": [\"e\", \"f\"], \"label\": 0}\n",
    ("{\"id\": \"a\", \"prompt\": \"p\", \"expected\": \"^x[0-9]+\", \"match\": \"regex\", \"stop\": \"\\n\", \"max_tokens\": 9}\n"
     "{\"prompt\": \"q\", \"choices\": [\"a\", \"b\"], \"label\": 1}\n"),
};

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const char alphabet[] = "{}[]\":,_\n\r 0123456789ABCDabc\"\\";
    long runs = 0;
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++, runs++)
        LLVMFuzzerTestOneInput((const uint8_t *)seeds[k], strlen(seeds[k]));
    for (int it = 0; it < 100000; it++, runs++) {
        char buf[700];
        strcpy(buf, seeds[it % (sizeof seeds / sizeof seeds[0])]);
        for (int m = 0; m < 1 + it % 6; m++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t len = strlen(buf), pos = len ? (size_t)(s >> 8) % (len + 1) : 0;
            char c = (s >> 40) % 7 == 0 ? (char)((s >> 48) & 0xFF) : alphabet[(s >> 32) % (sizeof alphabet - 1)];
            switch ((s >> 20) % 3) {
            case 0: if (len < sizeof buf - 2) memmove(buf + pos + 1, buf + pos, len - pos + 1), buf[pos] = c; break;
            case 1: if (pos < len) memmove(buf + pos, buf + pos + 1, len - pos); break;
            default: if (pos < len && c) buf[pos] = c;
            }
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, strlen(buf));
    }
    printf("fuzz_task: %ld inputs\n%ld passed, 0 failed\n", runs, runs);
    return 0;
}
#endif
