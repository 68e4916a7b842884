/*
 * A driver double for montrace's tests: loaded as libnvidia-ml.so.1 (LD_LIBRARY_PATH), it
 * answers the NVML entry points montrace's nvml.rs calls (through nvml-wrapper) from a JSON
 * script that the test writes and may rewrite while a run goes (read again whenever the file
 * changes: write a new file and rename it over the old one).
 *
 * The script is the file named by $NVML_DOUBLE_CONFIG:
 *
 *   { "init": "SUCCESS",                       (or an error name: "DRIVER_NOT_LOADED", ...)
 *     "init_ms": 15,                           (nvmlInit takes this long to answer; absent: 0)
 *     "devices": [ {
 *         "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...",
 *         "memory_total": 85899345920, "memory_used": 1073741824, "memory_reserved": 0,
 *         "util_gpu": 50, "util_memory": 20, "power_mw": 300000, "energy_mj": 123456,
 *         "temperature": 40, "sm_clock": 1980, "memory_clock": 2619, "throttle": 4,
 *         "energy_follows_power": false,      (true: the counter adds power_mw over time)
 *         "mig": 0,                           (1: MIG mode on; absent: NOT_SUPPORTED)
 *         "accounting": false,
 *         "compute":  [ {"pid": 123, "used": 1048576} ],    ("used": null: not available)
 *         "graphics": [ ... ],
 *         "samples":  [ {"pid": 123, "ts_us": 1700000000000000, "sm": 90, "mem": 30} ],
 *                                             (no "ts_us": stamped with the time of the call)
 *         "accounting_stats": [ {"pid": 123, "gpu_util": 80, "mem_util": 10,
 *                                "max_memory": 1048576, "time_ms": 1500,
 *                                "start_us": 1700000000000000, "running": false} ],
 *         "fail": { "nvmlDeviceGetPowerUsage": "NOT_SUPPORTED", "*": "GPU_IS_LOST" }
 *     } ] }
 *
 * A figure left out of a device answers NOT_SUPPORTED. "fail" makes the named entry point (or
 * every per-device one, "*") answer that error. Built with -DNVML_DOUBLE_OLD_DRIVER it lacks
 * the entry points an older driver lacks (the _v3 process lists, the v2 memory query).
 *
 * Every call appends its name to $NVML_DOUBLE_LOG when set (what montrace asked for).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

static const struct {
    const char *name;
    int code;
} ERRORS[] = {
    {"SUCCESS", 0},         {"UNINITIALIZED", 1},       {"INVALID_ARGUMENT", 2},
    {"NOT_SUPPORTED", 3},   {"NO_PERMISSION", 4},       {"ALREADY_INITIALIZED", 5},
    {"NOT_FOUND", 6},       {"INSUFFICIENT_SIZE", 7},   {"INSUFFICIENT_POWER", 8},
    {"DRIVER_NOT_LOADED", 9}, {"TIMEOUT", 10},          {"IRQ_ISSUE", 11},
    {"LIBRARY_NOT_FOUND", 12}, {"FUNCTION_NOT_FOUND", 13}, {"CORRUPTED_INFOROM", 14},
    {"GPU_IS_LOST", 15},    {"RESET_REQUIRED", 16},     {"OPERATING_SYSTEM", 17},
    {"LIB_RM_VERSION_MISMATCH", 18}, {"UNKNOWN", 999},
};

/* ---------------------------------------------------------------- a small JSON reader */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jval {
    enum jtype type;
    double num;      /* J_NUM, J_BOOL */
    char *str;       /* J_STR; the key of an object member */
    char *key;
    struct jval *kids; /* J_ARR, J_OBJ: first child */
    struct jval *next;
} jval;

typedef struct {
    const char *p;
    const char *end;
    int bad;
} jparser;

static void jfree(jval *v) {
    while (v) {
        jval *next = v->next;
        jfree(v->kids);
        free(v->str);
        free(v->key);
        free(v);
        v = next;
    }
}

static void skip_ws(jparser *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static char *parse_string(jparser *s) {
    if (s->p >= s->end || *s->p != '"') {
        s->bad = 1;
        return NULL;
    }
    s->p++;
    size_t cap = 16, n = 0;
    char *out = malloc(cap);
    while (s->p < s->end && *s->p != '"') {
        char ch = *s->p++;
        if (ch == '\\' && s->p < s->end) {
            char e = *s->p++;
            switch (e) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'u': /* \uXXXX: ASCII only, others as '?' */
                if (s->end - s->p >= 4) {
                    unsigned code = (unsigned)strtoul((char[5]){s->p[0], s->p[1], s->p[2], s->p[3], 0}, NULL, 16);
                    ch = code < 128 ? (char)code : '?';
                    s->p += 4;
                }
                break;
            default: ch = e;
            }
        }
        if (n + 2 > cap) out = realloc(out, cap *= 2);
        out[n++] = ch;
    }
    if (s->p >= s->end) s->bad = 1;
    else s->p++;
    out[n] = 0;
    return out;
}

static jval *parse_value(jparser *s, int depth);

static jval *parse_value(jparser *s, int depth) {
    skip_ws(s);
    if (s->p >= s->end || depth > 32) {
        s->bad = 1;
        return NULL;
    }
    jval *v = calloc(1, sizeof *v);
    char c = *s->p;
    if (c == '{' || c == '[') {
        v->type = c == '{' ? J_OBJ : J_ARR;
        char close = c == '{' ? '}' : ']';
        s->p++;
        jval **tail = &v->kids;
        skip_ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return v;
        }
        while (!s->bad) {
            char *key = NULL;
            if (v->type == J_OBJ) {
                skip_ws(s);
                key = parse_string(s);
                skip_ws(s);
                if (s->bad || s->p >= s->end || *s->p != ':') {
                    free(key);
                    s->bad = 1;
                    break;
                }
                s->p++;
            }
            jval *kid = parse_value(s, depth + 1);
            if (!kid) {
                free(key);
                break;
            }
            kid->key = key;
            *tail = kid;
            tail = &kid->next;
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && *s->p == close) {
                s->p++;
                break;
            }
            s->bad = 1;
        }
    } else if (c == '"') {
        v->type = J_STR;
        v->str = parse_string(s);
    } else if (!strncmp(s->p, "true", 4) || !strncmp(s->p, "false", 5)) {
        v->type = J_BOOL;
        v->num = *s->p == 't';
        s->p += *s->p == 't' ? 4 : 5;
    } else if (!strncmp(s->p, "null", 4)) {
        v->type = J_NULL;
        s->p += 4;
    } else {
        char *endp;
        v->type = J_NUM;
        v->num = strtod(s->p, &endp);
        if (endp == s->p) s->bad = 1;
        s->p = endp;
    }
    return v;
}

static jval *jget(const jval *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (jval *k = obj->kids; k; k = k->next)
        if (k->key && !strcmp(k->key, key)) return k;
    return NULL;
}

static jval *jindex(const jval *arr, unsigned i) {
    if (!arr || arr->type != J_ARR) return NULL;
    jval *k = arr->kids;
    while (k && i--) k = k->next;
    return k;
}

static unsigned jlen(const jval *arr) {
    unsigned n = 0;
    if (arr && arr->type == J_ARR)
        for (jval *k = arr->kids; k; k = k->next) n++;
    return n;
}

/* ---------------------------------------------------------------- the script */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static jval *script;
static struct stat script_stat;
static int initialized;

#define MAX_DEVICES 16
/* nvmlDevice_t is a pointer: one of these per index. */
static struct nvml_device {
    unsigned index;
} handles[MAX_DEVICES];

static void log_call(const char *name) {
    const char *path = getenv("NVML_DOUBLE_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

/* Reads the script again when the file changed. Call with the lock held. */
static void reload(void) {
    const char *path = getenv("NVML_DOUBLE_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        jfree(script);
        script = NULL;
        memset(&script_stat, 0, sizeof script_stat);
        return;
    }
    if (script && st.st_ino == script_stat.st_ino && st.st_size == script_stat.st_size &&
        st.st_mtim.tv_sec == script_stat.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == script_stat.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *text = malloc((size_t)st.st_size + 1);
    size_t n = fread(text, 1, (size_t)st.st_size, f);
    fclose(f);
    text[n] = 0;
    jparser s = {text, text + n, 0};
    jval *v = parse_value(&s, 0);
    free(text);
    if (s.bad || !v || v->type != J_OBJ) {
        /* A half-written script: keep the last good one. */
        fprintf(stderr, "nvml-double: cannot parse %s\n", path);
        jfree(v);
        return;
    }
    jfree(script);
    script = v;
    script_stat = st;
}

static int error_code(const jval *v) {
    if (!v) return NVML_SUCCESS;
    if (v->type == J_NUM) return (int)v->num;
    if (v->type != J_STR) return NVML_ERROR_UNKNOWN;
    const char *name = v->str;
    if (!strncmp(name, "NVML_ERROR_", 11)) name += 11;
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++)
        if (!strcmp(ERRORS[i].name, name)) return ERRORS[i].code;
    return NVML_ERROR_UNKNOWN;
}

static jval *devices(void) { return jget(script, "devices"); }

/* The device behind a handle, or NULL (and *rc set) when the call must fail. */
static jval *device_for(void *handle, const char *fn, nvmlReturn_t *rc) {
    *rc = NVML_SUCCESS;
    if (!initialized) {
        *rc = NVML_ERROR_UNINITIALIZED;
        return NULL;
    }
    struct nvml_device *h = handle;
    if (!h || h < handles || h >= handles + MAX_DEVICES) {
        *rc = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    jval *dev = jindex(devices(), h->index);
    if (!dev) {
        *rc = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    jval *fail = jget(dev, "fail");
    jval *why = jget(fail, fn);
    if (!why) why = jget(fail, "*");
    if (why) {
        *rc = error_code(why);
        return NULL;
    }
    return dev;
}

/* A number of the device: SUCCESS, or NOT_SUPPORTED when it is left out or null. */
static nvmlReturn_t number(jval *dev, const char *key, double *out) {
    jval *v = jget(dev, key);
    if (!v || v->type == J_NULL) return NVML_ERROR_NOT_SUPPORTED;
    *out = v->num;
    return NVML_SUCCESS;
}

#define BEGIN(fn)                                                                            \
    log_call(fn);                                                                            \
    pthread_mutex_lock(&lock);                                                               \
    reload();                                                                                \
    nvmlReturn_t rc;                                                                         \
    jval *dev = device_for(device, fn, &rc);                                                 \
    if (!dev) {                                                                              \
        pthread_mutex_unlock(&lock);                                                         \
        return rc;                                                                           \
    }

#define END(value)                                                                           \
    pthread_mutex_unlock(&lock);                                                             \
    return (value);

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

/* ---------------------------------------------------------------- the entry points */

typedef struct nvml_device *nvmlDevice_t;

static nvmlReturn_t do_init(const char *fn) {
    log_call(fn);
    pthread_mutex_lock(&lock);
    reload();
    nvmlReturn_t rc = script ? error_code(jget(script, "init")) : NVML_ERROR_DRIVER_NOT_LOADED;
    jval *init_ms = script ? jget(script, "init_ms") : NULL;
    double delay_ms = init_ms && init_ms->type == J_NUM ? init_ms->num : 0;
    pthread_mutex_unlock(&lock);
    /* A real driver's start: 15 ms on an H100, more on some machines. */
    if (delay_ms > 0) {
        struct timespec pause = {(time_t)(delay_ms / 1000),
                                 (long)((delay_ms - 1000 * (double)(time_t)(delay_ms / 1000)) * 1e6)};
        while (nanosleep(&pause, &pause) != 0) {
        }
    }
    pthread_mutex_lock(&lock);
    if (rc == NVML_SUCCESS) initialized++;
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return do_init("nvmlInitWithFlags");
}

nvmlReturn_t nvmlShutdown(void) {
    log_call("nvmlShutdown");
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = initialized ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialized) initialized--;
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++)
        if (ERRORS[i].code == result) return ERRORS[i].name;
    return "UNKNOWN";
}

static nvmlReturn_t device_count(const char *fn, unsigned int *count) {
    log_call(fn);
    pthread_mutex_lock(&lock);
    reload();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (!initialized) rc = NVML_ERROR_UNINITIALIZED;
    else if (!count) rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        unsigned n = jlen(devices());
        *count = n > MAX_DEVICES ? MAX_DEVICES : n;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    return device_count("nvmlDeviceGetCount_v2", count);
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
    return device_count("nvmlDeviceGetCount", count);
}

static nvmlReturn_t handle_by_index(const char *fn, unsigned int index, nvmlDevice_t *device) {
    log_call(fn);
    pthread_mutex_lock(&lock);
    reload();
    nvmlReturn_t rc = NVML_SUCCESS;
    jval *dev = jindex(devices(), index);
    if (!initialized) rc = NVML_ERROR_UNINITIALIZED;
    else if (!dev || index >= MAX_DEVICES || !device) rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        jval *fail = jget(dev, "fail");
        jval *why = jget(fail, fn);
        if (!why) why = jget(fail, "*");
        rc = error_code(why);
        if (rc == NVML_SUCCESS) {
            handles[index].index = index;
            *device = &handles[index];
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index("nvmlDeviceGetHandleByIndex_v2", index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index("nvmlDeviceGetHandleByIndex", index, device);
}

static nvmlReturn_t copy_string(jval *dev, const char *key, char *out, unsigned int length) {
    jval *v = jget(dev, key);
    if (!v || v->type != J_STR) return NVML_ERROR_NOT_SUPPORTED;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(v->str) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, v->str);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    BEGIN("nvmlDeviceGetName");
    END(copy_string(dev, "name", name, length));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    BEGIN("nvmlDeviceGetUUID");
    END(copy_string(dev, "uuid", uuid, length));
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    BEGIN("nvmlDeviceGetIndex");
    *index = device->index;
    END(NVML_SUCCESS);
}

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

static nvmlReturn_t memory(jval *dev, unsigned long long *total, unsigned long long *reserved,
                           unsigned long long *used) {
    double t, u, r = 0;
    if (number(dev, "memory_total", &t) || number(dev, "memory_used", &u))
        return NVML_ERROR_NOT_SUPPORTED;
    number(dev, "memory_reserved", &r);
    *total = (unsigned long long)t;
    *used = (unsigned long long)u;
    *reserved = (unsigned long long)r;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    BEGIN("nvmlDeviceGetMemoryInfo");
    unsigned long long total, reserved, used;
    rc = memory(dev, &total, &reserved, &used);
    if (rc == NVML_SUCCESS) {
        /* v1 counts the driver's reserved memory as used */
        m->total = total;
        m->used = used + reserved;
        m->free = total - m->used;
    }
    END(rc);
}

#ifndef NVML_DOUBLE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    BEGIN("nvmlDeviceGetMemoryInfo_v2");
    if ((m->version >> 24) != 2 || (m->version & 0xffffff) != sizeof(nvmlMemory_v2_t)) {
        END(NVML_ERROR_INVALID_ARGUMENT); /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH, in spirit */
    }
    unsigned long long total, reserved, used;
    rc = memory(dev, &total, &reserved, &used);
    if (rc == NVML_SUCCESS) {
        m->total = total;
        m->reserved = reserved;
        m->used = used;
        m->free = total - used - reserved;
    }
    END(rc);
}
#endif

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    BEGIN("nvmlDeviceGetUtilizationRates");
    double g, m;
    rc = number(dev, "util_gpu", &g) ? NVML_ERROR_NOT_SUPPORTED : number(dev, "util_memory", &m);
    if (rc == NVML_SUCCESS) {
        u->gpu = (unsigned)g;
        u->memory = (unsigned)m;
    }
    END(rc);
}

#define UINT_QUERY(fn, key, type)                                                            \
    nvmlReturn_t fn(nvmlDevice_t device, type *out) {                                        \
        BEGIN(#fn);                                                                          \
        double v;                                                                            \
        rc = number(dev, key, &v);                                                           \
        if (rc == NVML_SUCCESS) *out = (type)v;                                              \
        END(rc);                                                                             \
    }

UINT_QUERY(nvmlDeviceGetPowerUsage, "power_mw", unsigned int)
static unsigned long long now_us(void);
static unsigned long long loaded_us;

/* The energy counter: "energy_mj", plus, with "energy_follows_power": true, what "power_mw"
 * has used since the library was loaded (a counter that moves like a real one). */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *out) {
    BEGIN("nvmlDeviceGetTotalEnergyConsumption");
    double energy, power = 0;
    rc = number(dev, "energy_mj", &energy);
    jval *follows = jget(dev, "energy_follows_power");
    if (rc == NVML_SUCCESS && follows && follows->num != 0 && !number(dev, "power_mw", &power)) {
        if (!loaded_us) loaded_us = now_us();
        energy += power * (double)(now_us() - loaded_us) / 1e6;
    }
    if (rc == NVML_SUCCESS) *out = (unsigned long long)energy;
    END(rc);
}
UINT_QUERY(nvmlDeviceGetCurrentClocksThrottleReasons, "throttle", unsigned long long)
UINT_QUERY(nvmlDeviceGetCurrentClocksEventReasons, "throttle", unsigned long long)

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    BEGIN("nvmlDeviceGetTemperature");
    double v;
    rc = sensor != 0 ? NVML_ERROR_INVALID_ARGUMENT : number(dev, "temperature", &v);
    if (rc == NVML_SUCCESS) *temp = (unsigned)v;
    END(rc);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    BEGIN("nvmlDeviceGetClockInfo");
    double v;
    /* NVML_CLOCK_GRAPHICS 0, SM 1, MEM 2, VIDEO 3 */
    const char *key = type == 1 ? "sm_clock" : type == 2 ? "memory_clock" : NULL;
    rc = key ? number(dev, key, &v) : NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) *clock = (unsigned)v;
    END(rc);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                  unsigned int *pending) {
    BEGIN("nvmlDeviceGetMigMode");
    double v;
    rc = number(dev, "mig", &v);
    if (rc == NVML_SUCCESS) {
        *current = (unsigned)v;
        *pending = (unsigned)v;
    }
    END(rc);
}

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL

/* The process list `key`, in the real driver's manner: INSUFFICIENT_SIZE with the count when
 * the buffer is short (or null), else the entries and their count. `size` is the entry's. */
static nvmlReturn_t process_list(jval *dev, const char *key, unsigned int *count, void *infos,
                                 size_t size) {
    jval *list = jget(dev, key);
    if (!list) return NVML_ERROR_NOT_SUPPORTED;
    unsigned n = jlen(list);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < n || (!infos && n > 0)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    for (unsigned i = 0; i < n; i++) {
        jval *p = jindex(list, i);
        jval *used = jget(p, "used");
        jval *pid = jget(p, "pid");
        unsigned long long bytes = !used || used->type == J_NULL
                                       ? NVML_VALUE_NOT_AVAILABLE_ULL
                                       : (unsigned long long)used->num;
        if (size == sizeof(nvmlProcessInfo_t)) {
            nvmlProcessInfo_t *out = (nvmlProcessInfo_t *)infos + i;
            out->pid = pid ? (unsigned)pid->num : 0;
            out->usedGpuMemory = bytes;
            out->gpuInstanceId = 0xFFFFFFFF;
            out->computeInstanceId = 0xFFFFFFFF;
        } else {
            nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + i;
            out->pid = pid ? (unsigned)pid->num : 0;
            out->usedGpuMemory = bytes;
        }
    }
    return NVML_SUCCESS;
}

#define PROCESS_LIST(fn, key, type)                                                          \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *count, type *infos) {                 \
        BEGIN(#fn);                                                                          \
        END(process_list(dev, key, count, infos, sizeof(type)));                             \
    }

#ifndef NVML_DOUBLE_OLD_DRIVER
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, "compute", nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, "graphics", nvmlProcessInfo_t)
#endif
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, "compute", nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, "graphics", nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, "compute", nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, "graphics", nvmlProcessInfo_v1_t)

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long lastSeen) {
    BEGIN("nvmlDeviceGetProcessUtilization");
    jval *list = jget(dev, "samples");
    if (!list) {
        END(NVML_ERROR_NOT_SUPPORTED);
    }
    if (!count) {
        END(NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long now = now_us();
    unsigned n = 0;
    for (jval *s = list->kids; s; s = s->next) {
        jval *ts = jget(s, "ts_us");
        unsigned long long t = ts ? (unsigned long long)ts->num : now;
        if (t > lastSeen) n++;
    }
    if (n == 0) {
        END(NVML_ERROR_NOT_FOUND);
    }
    if (!samples || *count < n) {
        *count = n;
        END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned i = 0;
    for (jval *s = list->kids; s; s = s->next) {
        jval *ts = jget(s, "ts_us");
        unsigned long long t = ts ? (unsigned long long)ts->num : now;
        if (t <= lastSeen) continue;
        jval *pid = jget(s, "pid"), *sm = jget(s, "sm"), *mem = jget(s, "mem");
        samples[i].pid = pid ? (unsigned)pid->num : 0;
        samples[i].timeStamp = t;
        samples[i].smUtil = sm ? (unsigned)sm->num : 0;
        samples[i].memUtil = mem ? (unsigned)mem->num : 0;
        samples[i].encUtil = 0;
        samples[i].decUtil = 0;
        i++;
    }
    *count = i;
    END(NVML_SUCCESS);
}

/* NVML_FEATURE_DISABLED 0, ENABLED 1 */
nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, int *mode) {
    BEGIN("nvmlDeviceGetAccountingMode");
    jval *v = jget(dev, "accounting");
    if (!v) {
        END(NVML_ERROR_NOT_SUPPORTED);
    }
    *mode = v->num != 0;
    END(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count,
                                         unsigned int *pids) {
    BEGIN("nvmlDeviceGetAccountingPids");
    jval *mode = jget(dev, "accounting");
    if (!mode || mode->num == 0) {
        END(NVML_ERROR_NOT_SUPPORTED);
    }
    jval *list = jget(dev, "accounting_stats");
    unsigned n = jlen(list);
    if (!count) {
        END(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!pids || *count < n) {
        *count = n;
        END(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    *count = n;
    for (unsigned i = 0; i < n; i++) {
        jval *pid = jget(jindex(list, i), "pid");
        pids[i] = pid ? (unsigned)pid->num : 0;
    }
    END(NVML_SUCCESS);
}

typedef struct {
    unsigned int gpuUtilization, memoryUtilization;
    unsigned long long maxMemoryUsage, time, startTime;
    unsigned int isRunning;
    unsigned int reserved[5];
} nvmlAccountingStats_t;

nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                          nvmlAccountingStats_t *stats) {
    BEGIN("nvmlDeviceGetAccountingStats");
    jval *mode = jget(dev, "accounting");
    if (!mode || mode->num == 0) {
        END(NVML_ERROR_NOT_SUPPORTED);
    }
    for (jval *s = jget(dev, "accounting_stats") ? jget(dev, "accounting_stats")->kids : NULL; s;
         s = s->next) {
        jval *p = jget(s, "pid");
        if (!p || (unsigned)p->num != pid) continue;
        double v;
        memset(stats, 0, sizeof *stats);
        stats->gpuUtilization = number(s, "gpu_util", &v) ? 0xFFFFFFFF : (unsigned)v;
        stats->memoryUtilization = number(s, "mem_util", &v) ? 0xFFFFFFFF : (unsigned)v;
        stats->maxMemoryUsage =
            number(s, "max_memory", &v) ? NVML_VALUE_NOT_AVAILABLE_ULL : (unsigned long long)v;
        stats->time = number(s, "time_ms", &v) ? 0 : (unsigned long long)v;
        stats->startTime = number(s, "start_us", &v) ? 0 : (unsigned long long)v;
        jval *running = jget(s, "running");
        stats->isRunning = running && running->num != 0;
        END(NVML_SUCCESS);
    }
    END(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    log_call("nvmlSystemGetDriverVersion");
    const char *v = "580.00.double";
    if (!version || length < strlen(v) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(version, v);
    return NVML_SUCCESS;
}
