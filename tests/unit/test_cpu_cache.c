/* The L1 data cache size the decode kernels' prefetch rule uses
 * (util/cpu.h): CPUID's answer against what Linux reports in sysfs, and
 * the rule's choice for SmolLM2's and an 8B model's rows. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "util/cpu.h"

#if defined(__x86_64__)
/* Linux's level-1 data cache of cpu0 in bytes, or 0 where sysfs does not say. */
static size_t sysfs_l1d(void)
{
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        unsigned level = 0;
        size_t size = 0;
        char unit = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        int ok = fscanf(f, "%u", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (!ok || level != 1 || !(f = fopen(path, "r"))) continue;
        ok = fgets(buf, sizeof buf, f) != NULL && strncmp(buf, "Data", 4) == 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!ok || !(f = fopen(path, "r"))) continue;
        ok = fscanf(f, "%zu%c", &size, &unit) >= 1;
        fclose(f);
        if (ok) return size * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
    }
    return 0;
}
#endif

int main(void)
{
    const size_t l1 = lb__cpu_l1d_bytes();
    CHECK(l1 >= 4096 && l1 <= ((size_t)4 << 20), "L1d %zu bytes is a plausible size", l1);
#if defined(__x86_64__)
    const size_t linux_says = sysfs_l1d();
    if (linux_says) CHECK(l1 == linux_says, "CPUID's L1d %zu bytes, Linux's %zu", l1, linux_says);
    else printf("sysfs gives no L1d size here: CPUID's %zu bytes not compared\n", l1);
#else
    CHECK(l1 == 32768, "no CPUID here: the 32 KiB default (%zu)", l1);
#endif
    /* 4 rows fetched 2 row groups ahead: 3 x 4 x row bytes against half the L1 */
    CHECK(lb__prefetch_to_l1(288, 4, 2), "SmolLM2's 576-wide int4 rows go to L1");
    CHECK(!lb__prefetch_to_l1(576, 4, 2) || l1 >= 8 * 3 * 4 * 576, "576-wide int8 rows go to L2 on an L1 under 54 KiB");
    CHECK(!lb__prefetch_to_l1(2048, 4, 2), "4096-wide int4 rows go to L2");
    CHECK(!lb__prefetch_to_l1(16384, 4, 2), "4096-wide fp32 rows go to L2");
    CHECK(lb__prefetch_to_l1(l1 / 96, 4, 2) && !lb__prefetch_to_l1(l1 / 96 + 64, 4, 2), "the boundary is an eighth of the L1");
    return check_summary();
}
