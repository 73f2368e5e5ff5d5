/* Counters for GET /_sim/stats; see stats.h. */
#include "stats.h"

static const struct {
    int code;
    const char *name;
} outcomes[QW_SIM_POST_OUTCOMES] = {
    [QW_SIM_POST_202] = {202, "202"}, [QW_SIM_POST_400] = {400, "400"},
    [QW_SIM_POST_401] = {401, "401"}, [QW_SIM_POST_403] = {403, "403"},
    [QW_SIM_POST_404] = {404, "404"}, [QW_SIM_POST_405] = {405, "405"},
    [QW_SIM_POST_413] = {413, "413"}, [QW_SIM_POST_429] = {429, "429"},
    [QW_SIM_POST_500] = {500, "500"}, [QW_SIM_POST_503] = {503, "503"},
    [QW_SIM_POST_DROP] = {0, "drop"}, [QW_SIM_POST_HANG] = {0, "hang"},
};

enum qw_sim_post_outcome qw_sim_stats_outcome(int http_status)
{
    for (int i = 0; i < QW_SIM_POST_OUTCOMES; i++) {
        if (outcomes[i].code == http_status && http_status != 0)
            return (enum qw_sim_post_outcome)i;
    }
    return QW_SIM_POST_OUTCOMES;
}

const char *qw_sim_stats_outcome_name(enum qw_sim_post_outcome outcome)
{
    if ((unsigned)outcome >= QW_SIM_POST_OUTCOMES)
        return "other";
    return outcomes[outcome].name;
}

void qw_sim_stats_post(struct qw_sim_stats *s, enum qw_sim_post_outcome outcome)
{
    if ((unsigned)outcome < QW_SIM_POST_OUTCOMES)
        atomic_fetch_add(&s->posts[outcome], 1);
}

json_t *qw_sim_stats_to_json(struct qw_sim_stats *s)
{
    json_t *posts = json_object();
    if (!posts)
        return NULL;
    for (int i = 0; i < QW_SIM_POST_OUTCOMES; i++)
        json_object_set_new(posts, outcomes[i].name,
                            json_integer((json_int_t)atomic_load(&s->posts[i])));
    return json_pack(
        "{s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I}}", "posts", posts,
        "accepted", (json_int_t)atomic_load(&s->accepted), "duplicates",
        (json_int_t)atomic_load(&s->duplicates), "committed",
        (json_int_t)atomic_load(&s->committed), "invalid", (json_int_t)atomic_load(&s->invalid),
        "gets", (json_int_t)atomic_load(&s->gets), "statuses_served",
        (json_int_t)atomic_load(&s->statuses_served), "long_polls",
        (json_int_t)atomic_load(&s->long_polls), "restarts", (json_int_t)atomic_load(&s->restarts),
        "refused", "service", (json_int_t)atomic_load(&s->refused[0]), "global",
        (json_int_t)atomic_load(&s->refused[1]), "rate", (json_int_t)atomic_load(&s->refused[2]));
}
