/*
 * The JSON log of `dplan run` (run.h): one object per line, in OUT/log.jsonl
 * or --log, and on stdout. Every record is made by cli_log_record, so every
 * one carries the same header: who wrote it, the world, the backend, the
 * attempt (the launch it belongs to: 0, then one more per restart) and its
 * status ("running", "done", "checkpointing", "failed", "restarting",
 * "finished").
 */
#include "run.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

cJSON *cli_log_record(const struct cli_log *lg, const char *status)
{
    cJSON *o = cJSON_CreateObject();
    if (lg->source)
        cJSON_AddStringToObject(o, "source", lg->source);
    if (lg->rank >= 0)
        cJSON_AddNumberToObject(o, "rank", lg->rank);
    cJSON_AddNumberToObject(o, "world_size", lg->world);
    cJSON_AddStringToObject(o, "backend", "cpu");
    cJSON_AddNumberToObject(o, "attempt", lg->attempt);
    cJSON_AddStringToObject(o, "status", status);
    return o;
}

void cli_log_write(const struct cli_log *lg, cJSON *rec, bool print)
{
    char *s = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    if (!s)
        return;
    if (print) {
        printf("%s\n", s);
        fflush(stdout);
    }
    FILE *f = lg->f;
    if (!f && lg->path && (f = fopen(lg->path, "a+"))) {
        /* A line a killed rank left unfinished is ended first: every line stays one
         * JSON object. */
        if (fseek(f, -1, SEEK_END) == 0 && fgetc(f) != '\n') {
            fseek(f, 0, SEEK_END);
            fputc('\n', f);
        }
    }
    if (f) {
        fprintf(f, "%s\n", s);
        fflush(f);
    }
    if (f && f != lg->f)
        fclose(f);
    free(s);
}

void cli_log_last_status(const char *path, char *status, size_t cap)
{
    status[0] = '\0';
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return;
    char line[65536], last[65536] = "";
    while (fgets(line, sizeof line, f))
        if (line[0] == '{')
            snprintf(last, sizeof last, "%s", line);
    fclose(f);
    cJSON *o = last[0] ? cJSON_Parse(last) : NULL;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
    if (cJSON_IsString(st))
        snprintf(status, cap, "%s", st->valuestring);
    cJSON_Delete(o);
}
