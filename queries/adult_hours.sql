-- Average weekly hours and age by sex, among people over 25, most hours first.
-- Run: dpsql run queries/adult_hours.sql --metadata data/datasets/adult.yaml --epsilon 0.5
SELECT sex,
       COUNT(*)                 AS people,
       AVG("hours-per-week")    AS avg_hours,
       AVG(age)                 AS avg_age
FROM adult
WHERE age > 25
GROUP BY sex
ORDER BY avg_hours DESC;
